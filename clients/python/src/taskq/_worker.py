"""`taskq.Worker`: claims tasks and runs a handler on each, keeping their
leases, until it is told to stop.

The rules (CONTRACT §12):

- Claims are long polls (`wait_seconds`) for as many tasks as there are
  free slots (`count`, at most 25), with the worker's `tags` filter and
  `lease_seconds`.
- While a handler runs, its lease is renewed every third of
  `lease_seconds` by an update carrying only the `lease_id`. When a renewal
  answers `lease lost` (the lease ran out and someone else holds the task),
  the handler is cancelled: an async handler's task is cancelled, a sync
  handler's `current_job().cancelled` event is set; its result is dropped.
  A task whose lease was lost is never completed by this worker.
- A handler's result completes or fails its task (see `_outcome`).
- On SIGTERM, SIGINT or `stop()` the worker stops claiming, gives running
  handlers `grace_seconds` to finish, then cancels the rest and gives their
  tasks back to `pending` with the note `released by worker`.
- Under the org's per-minute limits (429 with `Retry-After`) the worker
  slows down and says so: it stops claiming until the limit lets calls
  through again, sends what finishes its tasks before renewals (`Updates`),
  renews all its leases in one call rather than one call each, and logs
  one line an episode (`rate limited: write, 30/min on the dev tier; claims
  paused for 12 s; 4 tasks held`) with an `error` event for `on_event`. A
  lease that runs out meanwhile uses no attempt on the server.

Everything runs on one asyncio loop: the claim loop, the renewals, and the
writes, which `Updates` sends in batches. Async handlers run on that loop;
sync handlers each run on a daemon thread of their own, so a handler that
ignores its cancellation cannot keep the process from exiting.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, List, Optional, Sequence, Union

from ._client import AsyncClient, Client
import httpx

from ._errors import ApiError, InDoubt
from ._outcome import completion, failure, release, renewal, without_output
from ._updates import BATCH, Updates

if TYPE_CHECKING:
    from . import models

#: Receives the claimed task (with its `lease_id`); see `_outcome` for what
#: its result does.
Handler = Callable[["models.ClaimedTask"], Any]
Hook = Callable[["WorkerEvent"], None]

_current: contextvars.ContextVar[Job] = contextvars.ContextVar("taskq_job")

logger = logging.getLogger("taskq.worker")

MAX_WAIT_SECONDS = 30
#: After a limit's pause, how much longer claims wait than the worker's
#: other calls, so that what it holds goes first.
THROTTLE_MARGIN = 1.0
#: What a claim may fail with and still be tried again; anything else (a
#: client used wrongly) ends `run()`.
RETRIED = (ApiError, InDoubt, httpx.HTTPError, OSError)
LOST = ("lease lost", "task not found")


class LeaseLost(Exception):
    """Raised by `Job.raise_if_cancelled` once the job's lease is gone."""


#: Refusals this far apart are one episode, logged once.
EPISODE_GAP = 30.0


class Throttle:
    """What the org's per-minute limits have said: until when claims wait,
    and whether the refusal heard opens a new episode."""

    def __init__(self) -> None:
        self.until = 0.0
        self.last = float("-inf")

    def refused(self, wait: float, now: float) -> bool:
        """Notes a refusal heard at `now` whose call goes again after
        `wait`; answers whether it opens an episode."""
        new = now - self.last > EPISODE_GAP
        self.last = now
        self.until = max(self.until, now + wait)
        return new

    def pause(self, now: float) -> float:
        """How long claims wait from `now`."""
        return max(0.0, self.until - now)

    def recent(self, now: float, within: float) -> bool:
        return now - self.last <= within


def describe_limit(body: Dict[str, Any], paused: float, held: int) -> str:
    """The episode's line: which limit, its number and tier, the pause."""
    kind = body.get("limit_type", "request")
    limit = body.get("limit")
    window = body.get("window_seconds", 60)
    per = "min" if window == 60 else f"{window}s"
    number = f", {limit}/{per}" if limit is not None else ""
    tier = f" on the {body['tier']} tier" if body.get("tier") else ""
    held_text = f"{held} task{'s' if held != 1 else ''} held"
    return f"rate limited: {kind}{number}{tier}; claims paused for {round(paused)} s; {held_text}"


@dataclass
class WorkerEvent:
    """What the worker tells its `on_event` hook (for metrics): `kind` is
    `claimed`, `completed`, `failed`, `lease_lost`, `released`, `renewed`
    or `error`; `seconds` is the handler's time for the finishing kinds."""

    kind: str
    task_id: Optional[str] = None
    seconds: Optional[float] = None
    error: Optional[str] = None


@dataclass
class Job:
    """One claimed task while its handler runs."""

    task: models.ClaimedTask
    started: float = field(default_factory=time.monotonic)
    renewed: float = field(default_factory=time.monotonic)
    #: Set when the handler should stop: its lease was lost or the worker stops.
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: running, finishing (its update is under way), lost or released.
    state: str = "running"
    handler: Optional[asyncio.Future[Any]] = None
    #: A renewal of this job's lease is under way.
    renewing: bool = False

    @property
    def task_id(self) -> str:
        return str(self.task["task_id"])

    @property
    def lease_id(self) -> str:
        return str(self.task["lease_id"])

    def raise_if_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise LeaseLost(self.task_id)


def current_job() -> Job:
    """The job whose handler is running (in that handler's task or thread)."""
    return _current.get()


class Worker:
    """Works the queue of `client`'s org with `handler`.

    - `tags`: claim only tasks with any of these tags.
    - `concurrency`: handlers running at once (async handlers on the loop,
      sync ones on threads).
    - `lease_seconds`: each claim's lease, renewed every third of it.
    - `wait_seconds`: how long one claim waits for a task (0 to 30).
    - `grace_seconds`: how long running handlers get once the worker stops.
    - `on_event`: called with a `WorkerEvent` for metrics.
    - `handle_signals`: stop on SIGTERM and SIGINT (main thread only).

    Given a `Client`, the worker makes an `AsyncClient` with its settings;
    give it an `AsyncClient` to choose its HTTP client (proxies, TLS).
    """

    def __init__(
        self,
        client: Union[Client, AsyncClient],
        handler: Handler,
        tags: Optional[Sequence[str]] = None,
        concurrency: int = 1,
        lease_seconds: int = 60,
        *,
        wait_seconds: int = 20,
        grace_seconds: float = 30.0,
        include_context: bool = True,
        on_event: Optional[Hook] = None,
        handle_signals: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 1 <= lease_seconds <= 259200:
            raise ValueError("lease_seconds must be within 1..=259200")
        self.client = client
        self.handler = handler
        self.tags = list(tags) if tags else None
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.wait_seconds = max(0, min(wait_seconds, MAX_WAIT_SECONDS))
        self.grace_seconds = grace_seconds
        self.include_context = include_context
        self.on_event = on_event
        self.handle_signals = handle_signals
        self._is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)
        )
        self._jobs: Dict[str, Job] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self._stop_asked = False
        self._slot_freed: Optional[asyncio.Event] = None
        self._throttle = Throttle()
        self._throttled: Optional[asyncio.Event] = None

    # ------------------------------------------------------------ running

    def run(self) -> None:
        """Works tasks until SIGTERM, SIGINT or `stop()`; then releases what
        is left and returns."""
        asyncio.run(self.run_async())

    def stop(self) -> None:
        """Asks the worker to stop (from any thread, or a handler)."""
        self._stop_asked = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)

    async def run_async(self) -> None:
        """`run()` for a caller that already runs an asyncio loop."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._slot_freed = asyncio.Event()
        if self._stop_asked:
            self._stop.set()
        signals = self._install_signals()
        client, owned = self._async_client()
        self._client = client
        self._throttled = asyncio.Event()
        stop_listening = client.on_rate_limited(self._rate_limited)
        updates = Updates(client)
        self._updates = updates
        renewer = asyncio.ensure_future(self._renew_loop(updates))
        logger.info(
            "worker started",
            extra={"concurrency": self.concurrency, "lease_seconds": self.lease_seconds, "tags": self.tags},
        )
        try:
            await self._claim_loop(client)
        finally:
            await self._drain(updates)
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)
            await updates.close()
            stop_listening()
            if owned:
                await client.aclose()
            for signum in signals:
                self._loop.remove_signal_handler(signum)
            self._loop = None
            logger.info("worker stopped")

    def _install_signals(self) -> List[signal.Signals]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return []
        assert self._loop is not None
        installed: List[signal.Signals] = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._loop.add_signal_handler(signum, self.stop)
                installed.append(signum)
            except (NotImplementedError, RuntimeError):
                pass
        return installed

    def _async_client(self) -> "tuple[AsyncClient, bool]":
        if isinstance(self.client, AsyncClient):
            return self.client, False
        return AsyncClient.from_settings(self.client.settings, max_connections=self.concurrency + 8), True

    def _emit(self, kind: str, job: Optional[Job] = None, seconds: Optional[float] = None, error: Optional[str] = None) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(WorkerEvent(kind, job.task_id if job else None, seconds, error))
        except Exception:  # noqa: BLE001 - a metrics hook must not stop the work
            logger.exception("the on_event hook raised")

    def _rate_limited(self, operation_id: str, body: Dict[str, Any], wait: float) -> None:
        now = time.monotonic()
        if self._throttle.refused(wait, now):
            line = describe_limit(body, self._throttle.pause(now), len(self._jobs))
            logger.warning(line)
            self._emit("error", error=line)
        if operation_id == "claim_task" and self._throttled is not None:
            # The claim under way was refused, so nothing of it was written:
            # it is given up rather than sent again when the limit allows.
            self._throttled.set()

    # ------------------------------------------------------------ claims

    async def _claim_loop(self, client: AsyncClient) -> None:
        assert self._stop is not None and self._slot_freed is not None
        failures = 0
        while not self._stop.is_set():
            free = self.concurrency - len(self._jobs)
            if free <= 0:
                self._slot_freed.clear()
                await self._until_stop(self._slot_freed.wait())
                continue
            body: Dict[str, Any] = {
                "lease_seconds": self.lease_seconds,
                "wait_seconds": self.wait_seconds,
                "count": min(free, BATCH),
                "include_context": self.include_context,
            }
            if self.tags:
                body["tags"] = self.tags
            pause = self._throttle.pause(time.monotonic())
            if pause > 0:
                # Claims wait for the limit; what the worker holds goes first.
                await self._until_stop(asyncio.sleep(pause + THROTTLE_MARGIN))
                continue
            assert self._throttled is not None
            self._throttled.clear()
            claim = asyncio.ensure_future(client.claim_task(body))  # type: ignore[arg-type]
            refused = asyncio.ensure_future(self._throttled.wait())
            if not await self._until_stop(asyncio.wait({claim, refused}, return_when=asyncio.FIRST_COMPLETED)):
                refused.cancel()
                claim.cancel()
                await asyncio.gather(claim, return_exceptions=True)
                break
            refused.cancel()
            if not claim.done():
                # Refused by a limit (nothing written): the next claim waits.
                claim.cancel()
                await asyncio.gather(claim, return_exceptions=True)
                continue
            try:
                answer: Any = claim.result()
            except RETRIED as error:
                failures += 1
                pause = min(30.0, 0.5 * 2 ** min(failures, 6))
                logger.warning("claim failed; trying again", extra={"error": repr(error), "pause": pause})
                self._emit("error", error=repr(error))
                await self._until_stop(asyncio.sleep(pause))
                continue
            failures = 0
            tasks = answer.get("tasks", []) if isinstance(answer, dict) else []
            for task in tasks:
                self._start(task)

    async def _until_stop(self, awaitable: Awaitable[Any]) -> bool:
        """Waits for `awaitable` unless the worker stops first (then cancels
        it); answers whether it finished."""
        assert self._stop is not None
        work = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stop.wait())
        done, _ = await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if work in done:
            return True
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return False

    # -------------------------------------------------------------- jobs

    def _start(self, task: models.ClaimedTask) -> None:
        job = Job(task)
        self._jobs[job.task_id] = job
        logger.info(f"task {job.task_id} claimed", extra={"task_id": job.task_id, "lease_id": job.lease_id})
        self._emit("claimed", job)
        asyncio.ensure_future(self._work(job))

    async def _work(self, job: Job) -> None:
        assert self._slot_freed is not None
        try:
            try:
                item = completion(job.task_id, job.lease_id, await self._call_handler(job))
            except asyncio.CancelledError:
                if job.state in ("lost", "released"):
                    return
                raise
            except Exception as error:  # noqa: BLE001 - a failing handler fails its task
                item = failure(job.task_id, job.lease_id, error)
            if job.state != "running":
                return
            job.state = "finishing"
            await self._finish(job, item)
        finally:
            self._jobs.pop(job.task_id, None)
            self._slot_freed.set()

    async def _call_handler(self, job: Job) -> Any:
        if self._is_async:
            job.handler = asyncio.ensure_future(self._async_handler(job))
        else:
            job.handler = self._thread_handler(job)
        return await job.handler

    async def _async_handler(self, job: Job) -> Any:
        _current.set(job)
        return await self.handler(job.task)

    def _thread_handler(self, job: Job) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any, error: Optional[BaseException]) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def run() -> None:
            _current.set(job)
            try:
                result = self.handler(job.task)
            except BaseException as error:  # noqa: BLE001 - carried to the loop
                loop.call_soon_threadsafe(settle, None, error)
            else:
                loop.call_soon_threadsafe(settle, result, None)

        threading.Thread(target=run, name=f"taskq-{job.task_id}", daemon=True).start()
        return future

    async def _finish(self, job: Job, item: Dict[str, Any]) -> None:
        seconds = time.monotonic() - job.started
        try:
            try:
                result = await self._updates.send(item)
            except ApiError as error:
                if error.status != 400:
                    raise
                # The server refused the item itself (an output too large):
                # fail the task with why, so it does not wait for its lease.
                item = without_output(item, error.error)
                result = await self._updates.send(item)
        except Exception as error:  # noqa: BLE001 - logged; the lease runs out
            logger.error(f"task {job.task_id}: could not finish it: {error!r}", extra={"task_id": job.task_id, "error": repr(error)})
            self._emit("error", job, error=repr(error))
            return
        problem = result.get("error")
        if problem is None:
            kind = str(item["status"])
            logger.info(f"task {job.task_id} {kind}", extra={"task_id": job.task_id, "seconds": round(seconds, 3)})
            self._emit(kind, job, seconds)
        elif problem in LOST and await self._landed(item):
            # A repeat of an update whose first attempt landed (its answer
            # was lost, or a node died after its commit) hears `lease lost`.
            kind = str(item["status"])
            logger.info(f"task {job.task_id} {kind}", extra={"task_id": job.task_id, "seconds": round(seconds, 3)})
            self._emit(kind, job, seconds)
        elif problem in LOST:
            logger.warning(f"task {job.task_id}: lease lost before it was finished", extra={"task_id": job.task_id})
            self._emit("lease_lost", job, seconds)
        else:
            logger.error(f"task {job.task_id}: the server refused to finish it: {problem}", extra={"task_id": job.task_id, "error": problem})
            self._emit("error", job, error=str(problem))

    async def _landed(self, item: Dict[str, Any]) -> bool:
        """Whether the task already has the status `item` gives it."""
        try:
            found = await self._client.get_tasks({"task_ids": [str(item["task_id"])]})
        except Exception:  # noqa: BLE001 - unknown counts as not landed
            return False
        return any(task.get("status") == item["status"] for task in found["tasks"])

    def _lose(self, job: Job) -> None:
        if job.state != "running":
            return
        job.state = "lost"
        job.cancelled.set()
        if job.handler is not None:
            job.handler.cancel()
        logger.warning(f"task {job.task_id}: lease lost; handler cancelled", extra={"task_id": job.task_id})
        self._emit("lease_lost", job)

    # ----------------------------------------------------------- renewals

    async def _renew_loop(self, updates: Updates) -> None:
        """Renews each lease every third of `lease_seconds` (every half
        while the org's limits have refused calls within a lease), and
        when one is due renews with it every lease past half its interval:
        one call renews them all, not one call each."""
        while True:
            await asyncio.sleep(min(self.lease_seconds / 3, 1.0))
            now = time.monotonic()
            interval = self.lease_seconds / (2 if self._throttle.recent(now, self.lease_seconds) else 3)
            running = [j for j in self._jobs.values() if j.state == "running" and not j.renewing]
            if not any(now - j.renewed >= interval for j in running):
                continue
            for job in running:
                if now - job.renewed >= interval / 2:
                    job.renewed = now
                    job.renewing = True
                    asyncio.ensure_future(self._renew(job, updates))

    async def _renew(self, job: Job, updates: Updates) -> None:
        try:
            result = await updates.send(renewal(job.task_id, job.lease_id))
        except Exception as error:  # noqa: BLE001 - the next renewal tries again
            job.renewing = False
            logger.warning(f"task {job.task_id}: lease renewal failed: {error!r}", extra={"task_id": job.task_id, "error": repr(error)})
            return
        job.renewing = False
        if result.get("error") in LOST:
            self._lose(job)
        elif result.get("error") is None:
            self._emit("renewed", job)

    # ------------------------------------------------------------- stop

    async def _drain(self, updates: Updates) -> None:
        running = [j.handler for j in self._jobs.values() if j.handler is not None]
        if running:
            logger.info("stopping: waiting for running handlers", extra={"running": len(running), "grace_seconds": self.grace_seconds})
            await asyncio.wait(running, timeout=self.grace_seconds)
            # Let the handlers that finished send their updates.
            await asyncio.sleep(0)
        left = [j for j in self._jobs.values() if j.state == "running"]
        for job in left:
            job.state = "released"
            job.cancelled.set()
            if job.handler is not None:
                job.handler.cancel()
        results = await asyncio.gather(
            *(updates.send(release(j.task_id, j.lease_id)) for j in left), return_exceptions=True
        )
        for job, result in zip(left, results):
            if isinstance(result, BaseException):
                logger.error(f"task {job.task_id}: could not release it: {result!r}", extra={"task_id": job.task_id, "error": repr(result)})
                self._emit("error", job, error=repr(result))
            else:
                logger.info(f"task {job.task_id} released", extra={"task_id": job.task_id})
                self._emit("released", job)
        # Updates under way finish before the writes stop.
        for _ in range(100):
            if not any(j.state == "finishing" for j in self._jobs.values()):
                break
            await asyncio.sleep(0.05)
