"""Answering on Ray Serve replicas (`python app.py --engine ray`): the model lives in the replicas of one Ray Serve
deployment, each loading it with the selected profile on its own resources (one GPU each where the cluster has GPUs,
CPU threads otherwise), and the page talks to them through `RaySession`, a `longqa.backend.Backend` like the embedded
`Session`: requests are planned on the page's side and answered, plan in hand, by one replica.

Composition layer. Ray Serve does the serving work: placement, restarts, routing, and the batching of windows from
concurrent requests into shared forward passes (`serve.batch`). This module only says what a replica does and how
the page's session reaches the replicas. It is not a pool of its own: the `replicas` strategy (threads over model
copies in one process) stays the one-machine option.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import math
import os
import queue
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Generator

import torch
from transformers import PreTrainedTokenizerBase

from longqa.backend import Gate, Selection
from longqa.readout import LoadReadout, Readout
from longqa.session import NO_MODEL, Session
from longqa_core.answering import Provisional, answer_plan
from longqa_core.batching import BatchState, WindowProgress, drain, is_out_of_memory, split_rows, stack_batches
from longqa_core.limits import EngineSettings
from longqa_core.plan import RequestPlan
from longqa_core.errors import Cancelled, InputError, LongQAError, ModelLoadError
from strategies.hardware import Hardware, detect_hardware
from strategies.profiles import Profile

APP_NAME = "longqa"
DEPLOYMENT_NAME = "AnswerReplica"
DEFAULT_BATCH_REQUESTS = 4  # concurrent requests whose batches may share one forward pass in a replica
BATCH_WAIT_S = 0.02  # how long a forward pass waits for other requests' batches to join it
POLL_S = 0.25  # how often a waiting request checks whether its visitor stopped it
RETRIES = 2  # a request whose replica died is sent again this many times (to a live replica) before failing
RETRY_PAUSE_S = 1.0
# A load replaces every replica at once, not Ray Serve's rolling 20 % (one replica after another), and a replica
# stopping looks for requests to finish every 0.2 s, not 2 s: the session holds new requests while it loads and waits
# for those in progress, so no request could use an old replica meanwhile, and one stopping has at most a cancelled
# request's last batch left. Redeploying 2 CPU replicas so took 53-59 s against 67-92 s rolling (a script beside
# other busy processes, kind B; not a committed measurement).
ROLLOUT_SHARE = 1.0
STOP_POLL_S = 0.2
PROJECT_ROOT = Path(__file__).resolve().parents[2]
UPLOAD_EXCLUDES = [".git", "results", "bench-results", ".cache", ".whl", "tests", "docs"]


class ReplicaLostError(LongQAError):
    """The replica answering a request stopped (killed, out of memory) and no other could finish it."""


def ray_modules():
    """(ray, ray.serve, ray.exceptions), imported on first use; ModelLoadError saying what to install when absent."""
    try:
        # Deferred: Ray is optional (requirements-ray.txt) and heavy (about a second to import); only
        # `--engine ray` needs it.
        import ray
        from ray import exceptions, serve  # deferred with it
    except ImportError:
        raise ModelLoadError("--engine ray needs Ray Serve: pip install -r requirements-ray.txt") from None
    return ray, serve, exceptions


def replica_id() -> str:
    """Which replica this is, as readouts name it: the Ray node's id (first 8 hex digits) and the process id."""
    ray, _, _ = ray_modules()
    return f"{ray.get_runtime_context().get_node_id()[:8]}:{os.getpid()}"


@dataclass
class RemoteModel:
    """What the page's side knows of the model the replicas hold: enough to preview requests (the tokenizer, the
    settings) and show the load readout. The weights stay in the replicas."""

    model_ref: str
    profile: Profile
    settings: EngineSettings
    tokenizer: PreTrainedTokenizerBase
    readout: LoadReadout  # as one replica measured it
    hardware: Hardware | None
    batch_state: BatchState | None = None  # the replicas' forward time, learned from their answers
    selection: Selection | None = None
    generation: int = 0
    model = None  # no weights on this side

    def unload(self) -> None:
        """Nothing to free here: the next deployment replaces the replicas."""


class ProgressBoard:
    """Where a replica posts each request's window progress and best answer so far, and the page's side reads
    them: Ray Serve routes every call to any replica, so the one answering a request cannot be asked directly. A Ray
    actor of RaySession's."""

    def __init__(self):
        self.states: dict[str, dict] = {}
        self.candidates: dict[str, Provisional] = {}

    def post(self, key: str, state: dict) -> None:
        self.states[key] = state

    def post_candidate(self, key: str, candidate: Provisional) -> None:
        self.candidates[key] = candidate

    def read(self, key: str) -> tuple[dict | None, Provisional | None]:
        """The request's latest progress and best answer so far (None for what was not posted yet)."""
        return self.states.get(key), self.candidates.get(key)

    def drop(self, key: str) -> None:
        self.states.pop(key, None)
        self.candidates.pop(key, None)


class AnswerReplica:
    """One replica of the deployment: loads (model, profile) when it starts, then answers requests. Windows of
    concurrent requests meet in `serve.batch` and share forward passes of up to `batch_requests` callers' batches.
    A load that fails raises with the reason, which Ray Serve reports as the deployment's failure."""

    def __init__(self, model_ref: str, profile: Profile, fallback_to_demo: bool, generation: int,
                 batch_requests: int = DEFAULT_BATCH_REQUESTS):
        self.replica = replica_id()
        self.generation = generation
        self.session = Session()
        self.session.load(model_ref, profile, fallback_to_demo=fallback_to_demo)
        _, serve, _ = ray_modules()
        self._tokenizers: queue.SimpleQueue = queue.SimpleQueue()  # a fast tokenizer serves one thread at a time
        # Each request's engine runs in a thread of its own, waiting on forward passes, which run one at a time in
        # one more thread: never in the requests' pool, or requests waiting for a pass could hold every thread.
        self._requests = ThreadPoolExecutor(max_ongoing_requests(batch_requests), thread_name_prefix="request")
        self._forward = ThreadPoolExecutor(1, thread_name_prefix="forward")
        self._forward_many = serve.batch(max_batch_size=batch_requests,
                                         batch_wait_timeout_s=BATCH_WAIT_S)(self._forward_merged)

    def describe(self) -> dict:
        loaded = self.session.loaded
        return {"model_ref": loaded.model_ref, "profile": loaded.profile, "settings": loaded.settings,
                "tokenizer": loaded.tokenizer, "readout": loaded.readout, "hardware": loaded.hardware,
                "replica": self.replica, "generation": self.generation}

    async def ask(self, plan: RequestPlan, extract_s: float = 0.0, progress: tuple | None = None) -> Readout:
        """The readout of one planned request (the embedded session's, plus `replica` and `generation`); its
        progress and best answer so far go to the board named in `progress` (board name, request key)."""
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        try:
            return await loop.run_in_executor(self._requests, self._answer, plan, extract_s, progress, loop, stop)
        except asyncio.CancelledError:  # the caller cancelled: end the engine between batches
            stop.set()
            raise

    async def training_step(self, window_tokens: int):
        return await asyncio.get_running_loop().run_in_executor(self._forward, self.session.training_step,
                                                                window_tokens)

    def _answer(self, plan: RequestPlan, extract_s: float, progress, loop, stop: threading.Event) -> Readout:
        loaded = self.session.loaded
        runner = SharedRunner(lambda batch: asyncio.run_coroutine_threadsafe(self._forward_many(batch),
                                                                             loop).result(),
                              loaded.runner.devices)
        tokenizer = self._borrow_tokenizer()
        try:
            result = answer_plan(runner, tokenizer, plan, batch_state=loaded.batch_state, extract_s=extract_s,
                                 should_stop=stop, on_window_progress=posting(progress, "post", dataclasses.asdict),
                                 on_candidate=posting(progress, "post_candidate"))
        finally:
            self._tokenizers.put(tokenizer)
        readout = self.session.readout(result)
        readout.replica, readout.generation = self.replica, self.generation
        return readout

    def _borrow_tokenizer(self):
        try:
            return self._tokenizers.get_nowait()
        except queue.Empty:
            return copy.deepcopy(self.session.loaded.tokenizer)

    async def _forward_merged(self, batches: list[dict]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One forward pass over the batches of every request that arrived together."""
        loaded = self.session.loaded
        loop = asyncio.get_running_loop()
        merged, rows = stack_batches(batches, loaded.tokenizer.pad_token_id)
        try:
            start, end = await loop.run_in_executor(self._forward, loaded.runner, merged)  # (sum of B, L) each
        except Exception as exc:
            if len(batches) == 1 or not is_out_of_memory(exc):
                raise
            del exc
            # Together they did not fit: each alone, each caller getting its own result or its own error (its
            # engine then halves its batch or says out of memory, as without batching).
            return [await self._forward_alone(loop, batch) for batch in batches]
        return split_rows(start, end, rows)

    async def _forward_alone(self, loop, batch: dict):
        try:
            return await loop.run_in_executor(self._forward, self.session.loaded.runner, batch)
        except Exception as exc:  # handed to its caller, who raises it
            return exc

    def pid(self) -> int:
        return os.getpid()


class SharedRunner:
    """A request's runner inside a replica: each batch goes to the replica's `serve.batch` queue, where it may join
    other requests' batches in one forward pass."""

    def __init__(self, submit: Callable[[dict], tuple[torch.Tensor, torch.Tensor]], devices):
        self.submit = submit
        self.devices = devices

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        result = self.submit(batch)
        if isinstance(result, BaseException):
            raise result
        return result


class RaySession(Session):
    """A backend (`longqa.backend.Backend`) whose model lives in the replicas of a Ray Serve deployment. Loading
    (re)deploys it: every replica starts with the new (model, profile) and Ray Serve replaces the old ones, so a
    request is answered wholly by one replica of one generation, never by a mix. Requests run side by side, up to
    `capacity`.

    It is the embedded `Session` with a loader that deploys (`_deploy`) and answers the replicas give: the session
    keeps the one record of what is loaded, plans, and counts the requests in progress, so that a load waits for
    every request the replicas are answering before it redeploys (as when embedded: a load never cuts a request in
    flight)."""

    def __init__(self, replicas: int = 1, address: str | None = None, batch_requests: int = DEFAULT_BATCH_REQUESTS,
                 cpus_per_replica: float | None = None, hardware: Hardware | None = None):
        ray, serve, _ = ray_modules()
        if replicas < 1:
            raise InputError("--replicas must be 1 or more.")
        super().__init__(load_model=self._deploy)
        self.replicas = replicas
        self.batch_requests = max(1, batch_requests)
        # No address: a local Ray instance of our own, on loopback, stopped on close (with Serve). "auto" or
        # HOST:PORT joins a cluster, where closing removes only this app: other Serve apps there stay.
        self.started_ray = address is None and not ray.is_initialized()
        if not ray.is_initialized():
            # Ray starts its workers at nice 15 (`worker_niceness`), which starves the replicas on a machine that
            # does anything else (docs/ray-serving.md, "Priority"): an instance of our own runs them at the page's
            # priority; a cluster keeps its operator's.
            local = ({"_node_ip_address": "127.0.0.1", "_system_config": {"worker_niceness": 0}}
                     if address is None else {})
            ray.init(address=address or "local", include_dashboard=False, log_to_driver=False,
                     configure_logging=False, runtime_env=code_environment(address), **local)
        serve.start(proxy_location="Disabled")  # the page calls the replicas through handles; no HTTP proxy
        self.resources = replica_resources(replicas, cpus_per_replica)
        self.hardware = hardware or ray.get(ray.remote(**self.resources)(detect_hardware).remote())
        check_room(self.resources, replicas)
        self.handle = None
        self.deployments = 0  # counts deployments, restored ones included: each answer names its own
        self._closed = False
        self._board = None  # the progress board (a Ray actor), started with the first deployment
        self._board_name: str | None = None

    @property
    def capacity(self) -> int:
        return self.replicas * self.batch_requests

    def _deploy(self, model_ref: str, profile: Profile, *, on_progress=None, fallback_to_demo: bool = False,
                hardware: Hardware | None = None) -> RemoteModel:
        _, serve, _ = ray_modules()
        if on_progress is not None:
            on_progress(0.1, f"Starting {self.replicas} replica(s) with {model_ref} and profile {profile.name}")
        deployment = serve.deployment(
            AnswerReplica, name=DEPLOYMENT_NAME, num_replicas=self.replicas, ray_actor_options=self.resources,
            max_ongoing_requests=max_ongoing_requests(self.batch_requests),
            max_constructor_retry_count=constructor_tries(self.replicas), rolling_update_percentage=ROLLOUT_SHARE,
            graceful_shutdown_wait_loop_s=STOP_POLL_S)
        self.deployments += 1
        app = deployment.bind(model_ref, profile, fallback_to_demo, self.deployments, self.batch_requests)
        self.board_name()  # its worker starts (imports torch: seconds) while the replicas load
        try:
            self.handle = serve.run(app, name=APP_NAME, route_prefix=None)
        except Exception as exc:  # Ray Serve reports a failed deployment as RuntimeError; the reason is in status
            raise ModelLoadError(f"The replicas could not load {model_ref!r} with profile {profile.name!r}: "
                                 f"{deployment_failure(exc)}") from None
        info = self.handle.describe.remote().result()
        ray, _, _ = ray_modules()
        ray.get(self._board.read.remote(""))  # ready before the first request, whose progress it carries
        if on_progress is not None:
            on_progress(1.0, f"{self.replicas} replica(s) ready")
        window_tokens = info["settings"].resolved(info["tokenizer"]).max_seq_len  # as the loader's: a whole window
        return RemoteModel(info["model_ref"], info["profile"], info["settings"], info["tokenizer"], info["readout"],
                           info["hardware"], BatchState(info["settings"].batch_size, window_tokens=window_tokens))

    def ask(self, plan: RequestPlan, *, extract_s: float = 0.0, gate: Gate | None = None, should_stop=None,
            on_window_progress=None, on_candidate=None) -> Readout:
        """`ask_steps` read to its end, each best answer so far told to `on_candidate`."""
        return drain(self.ask_steps(plan, extract_s=extract_s, gate=gate, should_stop=should_stop,
                                    on_window_progress=on_window_progress, best_so_far=on_candidate is not None),
                     on_candidate)

    def ask_steps(self, plan: RequestPlan, *, extract_s: float = 0.0, gate: Gate | None = None, should_stop=None,
                  on_window_progress=None, best_so_far: bool = True) -> Generator[Provisional, None, Readout]:
        """The readout of a planned request answered by one replica (with its `replica` id). A replica that dies
        with the request is replaced by Ray Serve, and the request is sent again; ReplicaLostError after RETRIES.

        `gate` gives the request one turn for its whole read (`Gate.whole`): in a replica, every request in progress
        puts its next batch into the shared forward pass (`serve.batch`), up to `--ray-batch` requests a replica, so
        the page's lane counts a request in the replicas as one turn of its `capacity`. The replica posts its
        progress and best answer so far to this session's board after each batch; `on_window_progress` hears them
        at the next poll (every 0.1 s), and each new best so far is yielded once. Closed at a yield, the call is
        cancelled."""
        with self.asking() as loaded:
            return (yield from self._ask(self.current(plan, loaded), extract_s, gate, should_stop,
                                         on_window_progress, best_so_far))

    def _ask(self, plan: RequestPlan, extract_s: float, gate: Gate | None, should_stop, on_window_progress,
             best_so_far: bool = False):
        if self.handle is None:
            raise ModelLoadError(NO_MODEL)
        progress = poll = None
        if on_window_progress is not None or best_so_far:
            progress = (self.board_name(), uuid.uuid4().hex)
            board = self._board
            heard: list[Provisional] = []

            def poll() -> Provisional | None:
                read = board.read.remote(progress[1])
                ray, _, _ = ray_modules()
                try:
                    state, candidate = ray.get(read, timeout=POLL_S)
                except Exception:  # noqa: BLE001 - progress is a courtesy: a slow or lost read shows none
                    return None
                if state is not None and on_window_progress is not None:
                    on_window_progress(WindowProgress(**state))
                if candidate is not None and best_so_far and (not heard or candidate != heard[-1]):
                    heard.append(candidate)
                    return candidate
                return None
        try:
            with gate.whole() if gate is not None else contextlib.nullcontext():
                readout = yield from self._call_steps(lambda: self.handle.ask.remote(plan, extract_s, progress),
                                                      should_stop, poll)
        finally:
            if progress is not None:
                self._board.drop.remote(progress[1])
        self.learn(readout)
        return readout

    def board_name(self) -> str:
        """The progress board of this session: one Ray actor, started with the first deployment."""
        if self._board is None:
            ray, _, _ = ray_modules()
            self._board_name = f"longqa-progress-{uuid.uuid4().hex[:8]}"
            self._board = ray.remote(num_cpus=0)(ProgressBoard).options(name=self._board_name).remote()
        return self._board_name

    def training_step(self, window_tokens: int):
        with self.asking():
            if self.handle is None:
                raise ModelLoadError(NO_MODEL)
            return drain(self._call_steps(lambda: self.handle.training_step.remote(window_tokens), None))

    def _call_steps(self, send, should_stop, poll=None):
        """A handle call (`send()`) waited for (`wait_steps`: what `poll` returns yielded), sent again to a live
        replica where the one answering it was lost."""
        _, _, ray_errors = ray_modules()
        for attempt in range(RETRIES + 1):
            try:
                return (yield from wait_steps(send(), should_stop, poll))
            except ray_errors.RayTaskError as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, LongQAError):
                    raise cause from None
                if is_replica_lost(cause):
                    error = cause
                else:
                    raise
            except Exception as exc:
                if not is_replica_lost(exc):
                    raise
                error = exc
            if is_out_of_memory_kill(error):
                raise ReplicaLostError("The replica answering this request ran out of memory and was restarted. "
                                       "Try again with fewer or shorter documents, or a profile that needs less "
                                       "memory.") from None
            if attempt < RETRIES:
                time.sleep(RETRY_PAUSE_S)
        raise ReplicaLostError(f"The replica answering this request stopped ({type(error).__name__}) and no other "
                               "could finish it. Please try again.")

    def close(self) -> None:
        """Remove the deployment; stop Ray where this session started it."""
        if self._closed:
            return
        self._closed = True
        self.loaded = None
        ray, serve, _ = ray_modules()
        try:
            if self.started_ray:
                serve.shutdown()
                ray.shutdown()
            else:
                serve.delete(APP_NAME)
        except Exception:  # noqa: BLE001 - shutting down: nothing left to tell anyone
            pass

    def replica_pids(self) -> set[int]:
        """The processes of the replicas answering now (asked of the replicas themselves; tests and faults)."""
        return {self.handle.pid.remote().result() for _ in range(4 * self.replicas)}


def code_environment(address: str | None) -> dict:
    """How the replicas find this project's code: on this machine, on their import path; on a cluster, uploaded
    (Ray Serve's `working_dir`), since other nodes need not have a checkout."""
    if address is None:
        path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return {"env_vars": {"PYTHONPATH": path}}
    return {"working_dir": str(PROJECT_ROOT), "excludes": UPLOAD_EXCLUDES}


def max_ongoing_requests(batch_requests: int) -> int:
    """Requests one replica takes at once: two forward passes' worth, so the next batch fills while one runs."""
    return max(2, 2 * batch_requests)


def constructor_tries(replicas: int) -> int:
    """Replica starts that may fail before a deployment counts as failed: one a replica. A load that fails says why
    (a profile this node cannot run, a model it cannot read), and says the same again: with Ray Serve's default of 3
    tries a replica (20 at most), tests/test_ray_serving.py's profile the 2 replicas cannot load took 92 s to be
    told and the old profile back; with one try each, 45 s (one worker, kind B)."""
    return max(1, replicas)


def check_room(resources: dict, replicas: int) -> None:
    """ModelLoadError at once when the cluster cannot hold the replicas (Ray Serve would wait for them forever)."""
    ray, _, _ = ray_modules()
    total = ray.cluster_resources()
    for key, name in (("num_gpus", "GPU"), ("num_cpus", "CPU")):
        need = resources.get(key, 0) * replicas
        if need > total.get(name, 0) + 1e-9:
            raise ModelLoadError(f"{replicas} replicas need {need:g} {name}s, and the Ray cluster has "
                                 f"{total.get(name, 0):g}: ask for fewer --replicas"
                                 f"{' or --ray-cpus-per-replica' if name == 'CPU' else ''}.")


def replica_resources(replicas: int, cpus_per_replica: float | None) -> dict:
    """Each replica's share of the cluster: one GPU where it has GPUs; otherwise CPU threads, the cluster's CPUs
    split between the replicas unless `cpus_per_replica` says."""
    ray, _, _ = ray_modules()
    resources = ray.cluster_resources()
    if resources.get("GPU", 0) >= 1:
        return {"num_gpus": 1, "num_cpus": cpus_per_replica or 1}
    if cpus_per_replica:
        return {"num_cpus": cpus_per_replica}
    cpus = resources.get("CPU", 1)
    # whole CPUs each while there are enough; more replicas than CPUs: each a share of one
    return {"num_cpus": math.floor(cpus / replicas) if replicas <= cpus else cpus / replicas}


def wait_steps(response, should_stop, poll=None):
    """A handle call's result, cancelled (Cancelled) as soon as `should_stop` says the visitor stopped it; `poll()`
    runs at every poll while it waits (the page's progress), and what it returns, where anything, is yielded (a new
    best answer so far). Closed at a yield, the call is cancelled (the replica ends the engine between batches)."""
    while True:
        try:
            return response.result(timeout_s=POLL_S)
        except TimeoutError:
            pass
        if should_stop is not None and should_stop():
            response.cancel()
            raise Cancelled("The request was cancelled.")
        heard = poll() if poll is not None else None
        if heard is not None:
            try:
                yield heard
            except GeneratorExit:
                response.cancel()
                raise


def posting(target, method: str, as_posted: Callable = lambda value: value) -> Callable | None:
    """On a replica: an engine callback that posts each value it hears to the requester's board (`method`: `post`
    for window progress, `post_candidate` for the best answer so far), or None when the requester shows none.
    `target` is (board name, request key)."""
    if target is None:
        return None
    ray, _, _ = ray_modules()
    board_name, key = target
    post = getattr(ray.get_actor(board_name), method)
    return lambda value: post.remote(key, as_posted(value))


def is_replica_lost(exc) -> bool:
    """Whether the replica serving a call went away (killed, crashed, out of memory) rather than the call failing."""
    _, _, ray_errors = ray_modules()
    lost = (ray_errors.RayActorError, ray_errors.ActorUnavailableError, ray_errors.WorkerCrashedError,
            ray_errors.OutOfMemoryError, ray_errors.NodeDiedError)
    return isinstance(exc, lost)


def is_out_of_memory_kill(exc) -> bool:
    """Whether Ray's memory monitor killed the replica: sent again, the same request would kill the next one."""
    _, _, ray_errors = ray_modules()
    return isinstance(exc, ray_errors.OutOfMemoryError)


def deployment_failure(exc: Exception) -> str:
    """Why the deployment failed, in one line: the last line of a replica's traceback, as Ray Serve records it."""
    _, serve, _ = ray_modules()
    try:
        status = serve.status().applications[APP_NAME].deployments[DEPLOYMENT_NAME]
        lines = [line.strip() for line in (status.message or "").splitlines() if line.strip()]
    except Exception:  # noqa: BLE001 - no status: fall back on the exception itself
        lines = []
    reason = lines[-1] if lines else str(exc)
    head, _, rest = reason.partition(": ")
    return rest if rest and "." in head and " " not in head else reason  # "pkg.mod.ErrorName: text" -> "text"
