"""The route gate (`longqa.serving.route_gate`) on a bare ASGI app: closed routes told in words, bodies refused by
their declared length before the app reads a byte, the routes that bound their own bodies passed as they are; the
join budgets (per address behind a proxy, of new sessions on a direct connection) as rules."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from longqa.serving.route_gate import JoinBudget, NewSessionBudget, RouteGate, SessionsHeard, body_cap_bytes
from longqa.serving.uploads import MIB
from tests.conftest import Clock


def call(gate: RouteGate, path: str, method: str = "POST", headers: list | None = None, body: bytes = b""):
    """One request through `gate`: (status, reply body, whether the app behind it was reached, body bytes the
    gate itself read)."""
    reached, read = [], [0]
    chunks = [body[i:i + 65536] for i in range(0, len(body), 65536)] or [b""]

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        chunk = chunks.pop(0) if chunks else b""
        read[0] += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    replies = []

    async def send(message):
        replies.append(message)

    gate.app = app
    scope = {"type": "http", "method": method, "path": path, "headers": headers or []}
    asyncio.run(gate(scope, receive, send))
    status = next(m["status"] for m in replies if m["type"] == "http.response.start")
    text = b"".join(m.get("body", b"") for m in replies if m["type"] == "http.response.body").decode()
    return status, text, bool(reached), read[0]


def gate(**kwargs) -> RouteGate:
    return RouteGate(None, max_body_bytes=kwargs.pop("max_body_bytes", 1000),
                     closed={"/gradio_api/process_recording": "This route is closed."}, **kwargs)


def test_a_body_over_the_cap_is_refused_by_its_declared_length_before_the_app_reads_it():
    status, text, reached, _ = call(gate(), "/gradio_api/queue/join", headers=[(b"content-length", b"1001")],
                                    body=b"x" * 1001)
    assert status == 413 and not reached
    assert "this server takes requests of at most" in text and "Upload a long document as a file" in text


def test_a_body_within_the_cap_and_a_request_without_a_body_reach_the_app():
    assert call(gate(), "/gradio_api/queue/join", headers=[(b"content-length", b"1000")], body=b"x" * 1000)[:3] == (
        200, "ok", True)
    assert call(gate(), "/gradio_api/cancel")[2]  # a POST without a body says no length: nothing to bound
    assert call(gate(), "/config", method="GET")[2]


def test_a_body_sent_in_chunks_of_undeclared_total_is_refused():
    status, text, reached, _ = call(gate(), "/gradio_api/run/predict", headers=[(b"transfer-encoding", b"chunked")],
                                    body=b"x" * 10)
    assert status == 411 and not reached and "Content-Length" in text


def test_a_route_that_bounds_its_own_bodies_is_passed_as_it_is():
    own = gate(own_bounds=("/gradio_api/upload",))
    assert call(own, "/gradio_api/upload", headers=[(b"content-length", b"5000")], body=b"x" * 5000)[2]


def test_a_closed_route_is_told_in_words_whatever_its_method_and_its_body_is_not_kept():
    for method in ("POST", "GET"):
        status, text, reached, _ = call(gate(), "/gradio_api/process_recording/", method=method,
                                        headers=[(b"content-length", b"3")], body=b"abc")
        assert (status, text, reached) == (404, "This route is closed.", False)


def test_the_cap_leaves_room_for_a_pasted_text_at_the_file_limit_with_its_escapes():
    cap = body_cap_bytes(50 * MIB)
    assert 50 * MIB + 50 * MIB // 8 < cap <= 50 * MIB + 50 * MIB // 8 + MIB
    assert cap < 100 * 10**6  # a 100 MB question is refused at the door (issue 61)


def test_an_address_may_send_its_burst_of_joins_then_its_rate_and_another_address_its_own():
    clock = Clock()
    budget = JoinBudget(per_s=2.0, burst=5, clock=clock)
    assert [budget.take("a") for _ in range(7)] == [True] * 5 + [False] * 2
    assert budget.take("b")  # another address: its own budget
    clock.now = 1.0  # two more a second
    assert [budget.take("a") for _ in range(3)] == [True, True, False]
    clock.now = 100.0
    assert sum(budget.take("a") for _ in range(10)) == 5  # a long pause refills the burst, no more


def test_joins_past_the_budget_are_refused_in_words_before_the_app_and_unknown_callers_are_not_counted():
    budgeted = gate(budgeted=("/gradio_api/queue/join", "/gradio_api/call/"), budget=JoinBudget(0.001, 2),
                    address_of=lambda headers: headers.get("x-forwarded-for"))
    one = [(b"x-forwarded-for", b"81.2.69.142"), (b"content-length", b"2")]
    assert [call(budgeted, "/gradio_api/queue/join", headers=one, body=b"{}")[2] for _ in range(2)] == [True, True]
    status, text, reached, _ = call(budgeted, "/gradio_api/call/ask", headers=one, body=b"{}")
    assert status == 429 and not reached and "Please wait a few seconds" in text
    assert call(budgeted, "/gradio_api/upload", headers=one, body=b"{}")[2]  # not a route that starts work
    anonymous = [(b"content-length", b"2")]
    assert all(call(budgeted, "/gradio_api/queue/join", headers=anonymous, body=b"{}")[2] for _ in range(5))


def test_sessions_heard_are_noted_from_the_heartbeat_route_the_latest_kept():
    heard = SessionsHeard(capacity=2)
    beat = gate(heard=heard, heard_route="/gradio_api/heartbeat/")
    assert call(beat, "/gradio_api/heartbeat/page-1", method="GET")[2]  # noted, and gradio still answers it
    call(beat, "/gradio_api/queue/join", headers=[(b"content-length", b"2")], body=b"{}")
    assert "page-1" in heard and "/gradio_api/queue/join" not in heard and "join" not in heard
    heard.note("page-2")
    heard.note("page-3")
    assert "page-1" not in heard and "page-2" in heard and "page-3" in heard
    heard.note("x" * 5000)
    assert "x" * 5000 in heard and None not in heard and "" not in heard


@pytest.mark.slow
def test_new_sessions_take_their_addresses_budget_and_known_or_heard_sessions_join_past_it():
    heard = SessionsHeard()
    sessions = NewSessionBudget(JoinBudget(per_s=0.001, burst=3), heard, {"held-elsewhere"}.__contains__, grace_s=0.3)
    admits = lambda address, session: asyncio.run(sessions.admits(address, session))  # noqa: E731
    assert admits("10.0.0.9", "open-page")  # a page that joined before, from another address
    assert [admits("127.0.0.1", f"fresh-{n}") for n in range(5)] == [True] * 3 + [False] * 2
    assert admits("127.0.0.1", "open-page")  # a session admitted before: past the budget, not counted
    assert admits("127.0.0.1", "fresh-1") and not admits("127.0.0.1", "fresh-4")  # admitted ones only
    assert admits("127.0.0.1", "held-elsewhere")  # one the server knows otherwise (`is_known`)
    heard.note("heartbeat-open")
    assert admits("127.0.0.1", "heartbeat-open")
    assert admits("10.0.0.7", "fresh-x")  # another address: its own budget
    assert admits(None, "fresh-y")  # no address: not counted
    began = time.monotonic()
    assert not admits("127.0.0.1", None)  # a join that names no session is always new, and nothing can be heard
    assert time.monotonic() - began < 0.1
    assert "new sessions" in sessions.refusal() and "Please wait a few seconds" in sessions.refusal()


@pytest.mark.slow
def test_a_new_session_past_the_budget_joins_when_its_heartbeat_is_heard_within_the_grace():
    heard = SessionsHeard()
    sessions = NewSessionBudget(JoinBudget(per_s=0.001, burst=0), heard, grace_s=1.0)

    async def heartbeat_behind_its_join():
        joining = asyncio.create_task(sessions.admits("127.0.0.1", "late-heartbeat"))
        await asyncio.sleep(0.1)
        heard.note("late-heartbeat")
        return await joining, await sessions.admits("127.0.0.1", "never-heard")

    began = time.monotonic()
    late, never = asyncio.run(heartbeat_behind_its_join())
    assert late and not never
    assert 1.0 <= time.monotonic() - began < 2.0  # the one never heard waited out its grace, no longer


def join_through(gate: RouteGate, body: bytes, client: str = "127.0.0.1", path: str = "/gradio_api/queue/join"):
    """One join through `gate` from `client`'s socket, its body sent in two chunks: (status, the reply, the body the
    app behind it read: None where it was not reached)."""
    chunks, reached, replies = [body[:7], body[7:]], [], []

    async def app(scope, receive, send):
        parts, message = [], {"more_body": True}
        while message.get("more_body"):
            message = await receive()
            parts.append(message.get("body", b""))
        reached.append(b"".join(parts))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def receive():
        return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks)}

    async def send(message):
        replies.append(message)

    gate.app = app
    headers = [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    asyncio.run(gate({"type": "http", "method": "POST", "path": path, "headers": headers, "client": (client, 5000)},
                     receive, send))
    status = next(m["status"] for m in replies if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in replies if m["type"] == "http.response.body"), \
        (reached or [None])[0]


def test_on_a_direct_connection_the_gate_reads_a_joins_session_and_refuses_new_ones_past_the_budget():
    heard = SessionsHeard()
    sessions = NewSessionBudget(JoinBudget(per_s=0.001, burst=2), heard, grace_s=0.05)
    door = gate(budgeted=("/gradio_api/queue/join", "/gradio_api/call/"), sessions=sessions, heard=heard,
                heard_route="/gradio_api/heartbeat/", max_body_bytes=MIB)

    def join(session, client="127.0.0.1", path="/gradio_api/queue/join"):
        body = json.dumps({"data": ["q"], "fn_index": 3, "session_hash": session}).encode()
        status, reply, passed = join_through(door, body, client, path)
        assert passed in (None, body)  # the app reads the join's body whole, as it was sent
        return status, reply, passed is not None

    assert [join(f"fresh-{n}")[0] for n in range(2)] == [200, 200]
    status, reply, reached = join("fresh-3")
    assert (status, reached) == (429, False) and "new sessions" in json.loads(reply)["detail"]
    assert join("fresh-0")[0] == 200  # it joined before: known, past the budget
    call(door, "/gradio_api/heartbeat/page-open", method="GET")
    assert join("page-open")[0] == 200  # heard on its heartbeat
    assert join("fresh-9", client="10.0.0.7")[0] == 200  # another socket address: its own budget
    assert join(None, path="/gradio_api/call/ask")[0] == 429  # a call names no session: new, and past the budget
    for garbled in (b"not json at all", b"[" * 200_000, b'{"session_hash": ' + b"[" * 200_000):
        refused = join_through(door, garbled, "127.0.0.1")
        assert refused[0] == 429 and refused[2] is None  # no session named: new (parsing it is the app's)
    named_in_text = json.dumps({"data": ['"session_hash": "fresh-0"'], "session_hash": "fresh-new"}).encode()
    assert join_through(door, named_in_text)[0] == 429  # a key inside a value's text is no key
    other_route = call(door, "/gradio_api/upload", headers=[(b"content-length", b"5")], body=b"12345")
    assert other_route[:3] == (200, "ok", True)  # only the joins are read


def test_a_join_whose_client_leaves_mid_body_reaches_nothing_and_the_app_reads_on_from_the_client():
    sessions = NewSessionBudget(JoinBudget(per_s=0.001, burst=5), SessionsHeard())
    door = gate(budgeted=("/gradio_api/queue/join",), sessions=sessions)
    reached, replies, after = [], [], []
    messages = [{"type": "http.request", "body": b'{"session_hash": ', "more_body": True}, {"type": "http.disconnect"}]

    async def app(scope, receive, send):
        reached.append(await receive())
        after.append(await receive())  # past the replayed body: the client's own next message

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        replies.append(message)

    door.app = app
    scope = {"type": "http", "method": "POST", "path": "/gradio_api/queue/join", "client": ("127.0.0.1", 1),
             "headers": [(b"content-length", b"40")]}
    asyncio.run(door(scope, receive, send))
    assert reached == [] and replies == []  # gone before its join was whole: nothing to answer
    messages[:] = [{"type": "http.request", "body": b'{"session_hash": "s"}', "more_body": False}]
    asyncio.run(door(scope, receive, send))
    assert reached == [{"type": "http.request", "body": b'{"session_hash": "s"}', "more_body": False}]
    assert after == [{"type": "http.disconnect"}]


def test_behind_a_proxy_a_joins_body_reaches_the_app_as_sent():
    door = gate(budgeted=("/gradio_api/queue/join",), budget=JoinBudget(per_s=0.001, burst=5),
                address_of=lambda headers: "81.2.69.142")
    status, _, passed = join_through(door, b'{"session_hash": "a"}')
    assert status == 200 and passed == b'{"session_hash": "a"}'
