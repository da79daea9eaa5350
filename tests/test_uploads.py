"""Uploads on disk (`longqa.serving.uploads`): a visitor's bytes and the total refused at the door, old unread
uploads making room, none deleted while read, each deleted after its time."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from longqa.serving.uploads import MIB, UploadGate, UploadRefused, UploadStore
from tests.conftest import Clock


@pytest.fixture
def clock():
    return Clock(1000.0)


def upload(store: UploadStore, tmp_path, name: str, n_bytes: int, visitor: str | None = None) -> str:
    """What the gate does around gradio's route: admit, write, record."""
    with store.admit(n_bytes, visitor):
        folder = tmp_path / name.replace(".", "-")
        folder.mkdir()
        path = folder / name
        path.write_bytes(b"x" * n_bytes)
    store.record([str(path)], visitor)
    return str(path)


def test_a_visitor_past_its_bytes_is_refused_and_others_are_not(tmp_path, clock):
    store = UploadStore(total_bytes=100 * MIB, per_visitor_bytes=3 * MIB, clock=clock)
    upload(store, tmp_path, "a.txt", 2 * MIB, "address:1")
    with pytest.raises(UploadRefused, match=r"would bring your uploads on this server to 4\.0 MB, over the 3\.0 MB "
                                            r"one visitor may hold\. Uploads are deleted 10 minutes after"):
        store.admit(2 * MIB, "address:1").__enter__()
    upload(store, tmp_path, "b.txt", 2 * MIB, "address:2")
    assert store.held_bytes("address:1") == store.held_bytes("address:2") == 2 * MIB


def test_uploads_being_written_count_before_they_are_recorded(tmp_path, clock):
    store = UploadStore(total_bytes=3 * MIB, clock=clock)
    with store.admit(2 * MIB):
        with pytest.raises(UploadRefused, match=r"holds 2\.0 MB of uploads, and this one \(2\.0 MB\) would pass the "
                                                r"3\.0 MB it keeps for all visitors"):
            store.admit(2 * MIB).__enter__()
    assert store.held_bytes() == 0


def test_the_total_makes_room_by_deleting_old_unread_uploads_oldest_first(tmp_path, clock):
    store = UploadStore(total_bytes=5 * MIB, clock=clock)
    oldest = upload(store, tmp_path, "oldest.txt", 2 * MIB)
    clock.now += 1
    read_now = upload(store, tmp_path, "read.txt", 2 * MIB)
    clock.now += 10
    with store.reading([read_now]):
        newest = upload(store, tmp_path, "newest.txt", 2 * MIB)  # the oldest goes; the one being read stays
        assert not store.is_known(oldest) and store.is_known(read_now) and store.is_known(newest)
        with pytest.raises(UploadRefused):  # the newest is too young to make room, the other is being read
            upload(store, tmp_path, "more.txt", 2 * MIB)
    assert store.held_bytes() == 4 * MIB
    assert not os.path.exists(oldest) and not os.path.exists(os.path.dirname(oldest))


def test_uploads_are_deleted_after_their_time_unless_being_read(tmp_path, clock):
    deleted = []
    store = UploadStore(keep_s=600, clock=clock, on_delete=deleted.append)
    kept, read = upload(store, tmp_path, "kept.txt", 10), upload(store, tmp_path, "read.txt", 10)
    clock.now += 599
    assert store.sweep() == 0
    clock.now += 2
    with store.reading([read]):
        assert store.sweep() == 4096  # one file of at least a block
    assert deleted == [kept] and store.is_known(read)
    store.sweep()
    assert deleted == [kept, read] and store.held_bytes() == 0


def test_the_store_tells_a_deleted_upload_from_a_path_it_never_held(tmp_path, clock, monkeypatch):
    monkeypatch.setattr("longqa.serving.uploads.MAX_DELETED_NAMED", 2)
    store = UploadStore(keep_s=600, clock=clock)
    paths = [upload(store, tmp_path, f"{n}.txt", 10) for n in "abc"]
    assert not any(store.was_deleted(p) for p in paths)
    clock.now += 601
    store.sweep()
    assert [store.was_deleted(p) for p in paths] == [False, True, True]  # the last two remembered, no more
    assert not store.was_deleted(str(tmp_path / "never" / "x.txt"))


def call_gate(gate: UploadGate, headers: dict, body: bytes = b"x") -> tuple[int, bytes]:
    """One POST through the gate, as an ASGI server sends it: (status, body of the reply)."""
    scope = {"type": "http", "method": "POST", "path": "/gradio_api/upload",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(gate(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_the_gate_refuses_by_content_length_before_the_route_runs_and_records_what_it_wrote(tmp_path, clock):
    store = UploadStore(total_bytes=100 * MIB, per_visitor_bytes=2 * MIB, clock=clock)
    written = tmp_path / "h" / "a.txt"
    routed = []

    async def route(scope, receive, send):  # gradio's upload route: writes the file, answers with its path
        routed.append(scope["path"])
        written.parent.mkdir(exist_ok=True)
        written.write_bytes(b"x" * MIB)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps([str(written)]).encode()})

    gate = UploadGate(route, store, "/gradio_api/upload", visitor_of=lambda headers: headers.get("x-visitor"))
    assert call_gate(gate, {"X-Visitor": "a"})[0] == 411 and not routed  # no length: no upload
    assert call_gate(gate, {"Content-Length": str(MIB + 200), "X-Visitor": "a"})[0] == 200
    assert store.is_known(str(written)) and store.held_bytes("a") == MIB
    status, message = call_gate(gate, {"Content-Length": str(MIB + 200), "X-Visitor": "a"})
    assert status == 413 and b"one visitor may hold" in message and len(routed) == 1
    assert call_gate(gate, {"Content-Length": str(MIB + 200), "X-Visitor": "b"})[0] == 200  # another visitor


def test_an_upload_two_pages_hold_lives_until_both_let_go_and_each_lets_go_only_of_its_own(tmp_path, clock):
    store = UploadStore(keep_s=600, clock=clock)
    shared = upload(store, tmp_path, "shared.txt", 10)  # gradio names a file by its bytes: both pages get this path
    store.claim("session:a", [shared])
    store.claim("session:b", [shared])
    clock.now += 601
    store.claim("session:b", [])  # b removes it from its documents, after the upload's own time
    assert store.sweep() == 0 and os.path.exists(shared)  # a still holds it
    clock.now += 6000
    assert store.sweep() == 0 and os.path.exists(shared) and store.is_claimed(shared)
    store.release("session:a")  # a closes its page
    assert store.sweep() == 4096 and not os.path.exists(shared) and not store.is_claimed(shared)


def test_a_page_that_drops_an_upload_before_its_time_leaves_it_its_time(tmp_path, clock):
    store = UploadStore(keep_s=600, clock=clock)
    path = upload(store, tmp_path, "a.txt", 10)
    store.claim("session:a", [path])
    store.claim("session:a", [])
    assert store.sweep() == 0 and os.path.exists(path)
    clock.now += 601
    assert store.sweep() == 4096


def test_a_copy_of_a_bundled_example_is_never_deleted_whoever_uploads_it(tmp_path, clock):
    example = tmp_path / "harbour_records.txt"
    example.write_text("The harbour records say the tide is high at noon.\n" * 20)
    store = UploadStore(keep_s=600, clock=clock)
    store.keep_copies_of([example])
    copy = tmp_path / "hash" / "harbour_records.txt"  # where gradio puts both the example's copy and an upload of it
    copy.parent.mkdir()
    copy.write_bytes(example.read_bytes())
    store.record([str(copy)], "address:b")
    other = upload(store, tmp_path, "other.txt", len(example.read_bytes()))  # same size, other bytes
    store.claim("session:b", [str(copy), other])
    store.release("session:b")
    clock.now += 10_000
    store.sweep()
    store.delete_all()
    assert copy.exists() and not store.is_known(str(copy)) and store.held_bytes("address:b") == 0
    assert not os.path.exists(other)


def test_the_total_makes_room_from_uploads_no_page_holds_first(tmp_path, clock):
    store = UploadStore(total_bytes=5 * MIB, clock=clock)
    held = upload(store, tmp_path, "held.txt", 2 * MIB)
    clock.now += 1
    unheld = upload(store, tmp_path, "unheld.txt", 2 * MIB)
    store.claim("session:a", [held])
    clock.now += 10
    upload(store, tmp_path, "new.txt", 2 * MIB)
    assert store.is_known(held) and not store.is_known(unheld)
