"""Waiting for tasks and the event stream, against the real server: a wait
released by another call's completion, events in order and live, a stream
resumed after its last event, and one whose connections are cut mid-way
read on without a gap or a repeat."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, cast

import pytest

import taskq

from .proxy import StreamCuttingProxy


class Reader:
    """Iterates `events` in a thread of its own until `count` came, then
    closes it; the test meanwhile acts and waits for what it expects."""

    def __init__(self, events: Iterator[taskq.StreamEvent], count: int) -> None:
        self.events: List[taskq.StreamEvent] = []
        self.error: Optional[BaseException] = None
        self._count = count
        self._changed = threading.Condition()
        self._source = events
        self._done = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            for event in self._source:
                with self._changed:
                    self.events.append(event)
                    self._changed.notify_all()
                if len(self.events) == self._count:
                    break
        except BaseException as error:  # noqa: BLE001 - the test raises it
            self.error = error
        finally:
            close = getattr(self._source, "close", None)
            if close is not None:
                close()
            with self._changed:
                self._done = True
                self._changed.notify_all()

    def wait_for(self, n: int, timeout: float = 30.0) -> List[taskq.StreamEvent]:
        with self._changed:
            self._changed.wait_for(lambda: len(self.events) >= n or self._done, timeout)
            if self.error is not None:
                raise self.error
            assert len(self.events) >= n, f"{len(self.events)} of {n} events came in {timeout} s: {self.events}"
            return list(self.events[:n])

    def all(self, timeout: float = 30.0) -> List[taskq.StreamEvent]:
        events = self.wait_for(self._count, timeout)
        with self._changed:
            assert self._changed.wait_for(lambda: self._done, timeout), "the stream was not closed"
        return events


def collect(events: Iterator[taskq.StreamEvent], count: int) -> List[taskq.StreamEvent]:
    return Reader(events, count).all()


def create(client: taskq.Client, title: str) -> str:
    return client.create_tasks({"tasks": [{"title": title}]})["results"][0]["task_id"]


def update(client: taskq.Client, item: Dict[str, Any]) -> None:
    answer = client.update_tasks({"updates": [cast(Any, item)]})
    assert answer["updated"] == 1, answer


def summary(events: List[taskq.StreamEvent]) -> List[Tuple[int, str, str]]:
    return [(e.id, e.type, e.data["data"]["task_id"]) for e in events]


def until(what: str, check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def waits_held(admin: taskq.Client) -> int:
    for line in admin.metrics().splitlines():
        if line.startswith("taskq_task_waits "):
            return int(float(line.split()[1]))
    raise AssertionError("no taskq_task_waits in /metrics")


# ------------------------------------------------------------------- waiting


def test_a_wait_is_released_by_a_completion_from_another_call(url: str, client: taskq.Client, admin: taskq.Client) -> None:
    task = create(client, "to wait for")
    claimed = client.claim_task({"lease_seconds": 60})
    assert claimed is not None and "lease_id" in claimed
    held_before = waits_held(admin)
    answers: List[Any] = []

    def wait() -> None:
        with taskq.Client(url, client.settings.api_key) as waiter:
            started = time.monotonic()
            answers.append(waiter.wait([task], wait_seconds=30))
            answers.append(time.monotonic() - started)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    until("the server holds the wait", lambda: waits_held(admin) > held_before)
    assert not answers, "the wait answered before the task was finished"
    update(client, {"task_id": task, "lease_id": claimed["lease_id"], "status": "completed", "note": "done"})
    thread.join(timeout=15)
    assert answers, "the wait was not released by the completion"
    answer, seconds = answers
    assert answer["done"] is True and answer["not_found"] == []
    assert [(t["task_id"], t["status"]) for t in answer["tasks"]] == [(task, "completed")]
    assert seconds < 25


def test_waits_answer_with_what_they_found(client: taskq.Client) -> None:
    done, pending = create(client, "done"), create(client, "pending")
    update(client, {"task_id": done, "status": "canceled", "note": "not needed", "assignee": "owner"})
    unknown = "00000000-0000-4000-8000-000000000001"
    anyone = client.wait([done, pending, unknown], until="any", wait_seconds=5)
    assert anyone["done"] is True and anyone["not_found"] == [unknown]
    assert [t["status"] for t in anyone["tasks"]] == ["canceled", "pending"]
    started = time.monotonic()
    everyone = client.wait([done, pending], wait_seconds=1)
    assert everyone["done"] is False and 0.9 <= time.monotonic() - started < 10


def test_waiting_until_done_gives_up_at_its_timeout(client: taskq.Client) -> None:
    pending = create(client, "never finished")
    started = time.monotonic()
    answer = client.wait_until_done([pending], timeout=1.5)
    took = time.monotonic() - started
    assert answer["done"] is False and answer["tasks"][0]["status"] == "pending"
    assert 1.5 <= took < 6, took
    # Nothing to wait for: it answers at once instead of looping.
    nothing = client.wait_until_done(["00000000-0000-4000-8000-000000000002"], until="any")
    assert nothing["done"] is False and nothing["not_found"] == ["00000000-0000-4000-8000-000000000002"]


# ---------------------------------------------------------------- the stream


def test_events_come_in_order_replayed_then_live(client: taskq.Client) -> None:
    a = create(client, "a")
    reader = Reader(client.events(since=0), 4)
    first = reader.wait_for(1)
    assert (first[0].type, first[0].data["data"]["task_id"]) == ("task.created", a)
    # The stream is open: what follows comes live.
    claimed = client.claim_task({"lease_seconds": 60})
    assert claimed is not None and "lease_id" in claimed
    update(client, {"task_id": a, "lease_id": claimed["lease_id"], "status": "completed", "note": "done"})
    b = create(client, "b")
    events = reader.all()
    assert [(t, task) for _, t, task in summary(events)] == [
        ("task.created", a),
        ("task.claimed", a),
        ("task.completed", a),
        ("task.created", b),
    ]
    ids = [e.id for e in events]
    assert ids == sorted(set(ids))
    assert all(e.data["type"] == e.type for e in events)
    completed = events[2].data["data"]
    assert (completed["from_status"], completed["to_status"]) == ("in_progress", "completed")
    # Filters keep only what they name.
    assert summary(collect(client.events(since=0, types=["task.completed"]), 1)) == [summary(events)[2]]
    assert summary(collect(client.events(since=0, task_ids=[b]), 1)) == [summary(events)[3]]


def test_an_unnamed_change_is_a_status_change(client: taskq.Client) -> None:
    task = create(client, "paused")
    update(client, {"task_id": task, "status": "paused", "note": "later", "assignee": "owner"})
    events = collect(client.events(since=0), 2)
    assert [e.type for e in events] == ["task.created", "task.status_changed"]
    assert events[1].data["type"] == "task.status_changed"


def test_a_stream_resumes_after_the_last_event_it_handed_out(client: taskq.Client) -> None:
    tasks = [create(client, f"t{i}") for i in range(3)]
    claimed = client.claim_task({"lease_seconds": 60})
    assert claimed is not None and "lease_id" in claimed
    update(client, {"task_id": tasks[0], "lease_id": claimed["lease_id"], "status": "completed", "note": "done"})
    every = collect(client.events(since=0), 5)
    head = collect(client.events(since=0), 2)
    assert summary(head) == summary(every[:2])
    rest = Reader(client.events(since=head[-1].id), 4)
    assert summary(rest.wait_for(3)) == summary(every[2:])
    # Exactly the rest: the next event is a new one.
    later = create(client, "later")
    assert [(t, task) for _, t, task in summary(rest.all())[3:]] == [("task.created", later)]


@pytest.mark.parametrize("clean", [True, False], ids=["stream-ended", "connection-broke"])
def test_the_iterator_reads_on_across_cut_connections(url: str, client: taskq.Client, clean: bool) -> None:
    for i in range(5):
        create(client, f"t{i}")
    claimed = client.claim_task({"count": 2, "lease_seconds": 60})
    assert claimed is not None and "tasks" in claimed and len(claimed["tasks"]) == 2
    every = collect(client.events(since=0), 7)
    proxy = StreamCuttingProxy(url, keep=2, clean=clean)
    try:
        with taskq.Client(proxy.url, client.settings.api_key) as through:
            reader = Reader(through.events(since=0), 8)
            assert summary(reader.wait_for(7)) == summary(every)
            later = create(client, "later")
            events = reader.all()
    finally:
        proxy.close()
    assert proxy.cuts >= 3, f"the proxy cut {proxy.cuts} connections"
    assert summary(events[:7]) == summary(every)
    assert [(t, task) for _, t, task in summary(events)[7:]] == [("task.created", later)]


def test_a_stream_refused_for_good_raises(url: str, client: taskq.Client) -> None:
    with pytest.raises(taskq.ApiError) as invalid:
        next(taskq.Client(url, "tq_not_a_key").events())
    assert invalid.value.status == 401
    with pytest.raises(taskq.ApiError) as malformed:
        next(client.events(types=["task.exploded"]))
    assert malformed.value.status == 400 and "types" in malformed.value.error
    # Ten streams a key: the eleventh is refused without Retry-After, so not retried.
    create(client, "open")
    streams = [client.events(since=0) for _ in range(10)]
    try:
        for stream in streams:
            assert next(stream).type == "task.created"
        with pytest.raises(taskq.ApiError) as refused:
            next(client.events(since=0))
        assert refused.value.status == 429 and refused.value.body["limit_type"] == "streams"
    finally:
        for stream in streams:
            stream.close()


# ---------------------------------------------------------------- async


def test_the_async_client_waits_and_streams_across_cut_connections(url: str, new_org: Any) -> None:
    org = new_org()

    async def tour() -> None:
        async with taskq.AsyncClient(url, org.key) as client:
            task = (await client.create_tasks({"tasks": [{"title": "async"}]}))["results"][0]["task_id"]
            waiting = asyncio.ensure_future(client.wait([task], wait_seconds=30))
            claimed = await client.claim_task({"lease_seconds": 60})
            assert claimed is not None and "lease_id" in claimed
            await client.update_tasks({"updates": [{"task_id": task, "lease_id": claimed["lease_id"], "status": "completed", "note": "done"}]})
            answer = await asyncio.wait_for(waiting, 15)
            assert answer["done"] is True and answer["tasks"][0]["status"] == "completed"
            assert (await client.wait_until_done([task], timeout=5))["done"] is True

            proxy = StreamCuttingProxy(url, keep=1, clean=False)
            try:
                async with taskq.AsyncClient(proxy.url, org.key) as through:
                    seen: List[taskq.StreamEvent] = []

                    async def read() -> None:
                        async with contextlib.aclosing(through.events(since=0)) as events:
                            async for event in events:
                                seen.append(event)
                                if len(seen) == 3:
                                    return

                    await asyncio.wait_for(read(), 30)
            finally:
                proxy.close()
            assert [e.type for e in seen] == ["task.created", "task.claimed", "task.completed"]
            assert proxy.cuts >= 2
            ids = [e.id for e in seen]
            assert ids == sorted(set(ids))

    asyncio.run(tour())
