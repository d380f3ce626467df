"""The worker against the real server: what a handler's result becomes, and
a lost lease cancelling the handler (async and sync) without the task
being completed by the worker that lost it."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List

import taskq


def history_of(client: taskq.Client, task_id: str) -> List[Dict[str, Any]]:
    return list(client.get_tasks({"task_ids": [task_id]})["tasks"][0]["history"])


def wait_until(what: str, check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def test_results_become_completions_and_failures(client: taskq.Client) -> None:
    titles = ["plain", "none", "done", "fail", "raise"]
    created = client.create_tasks({"tasks": [{"title": t} for t in titles]})
    ids = {t: r["task_id"] for t, r in zip(titles, created["results"])}

    def handler(task: Dict[str, Any]) -> Any:
        title = task["title"]
        if title == "plain":
            return {"echo": title}
        if title == "none":
            return None
        if title == "done":
            return taskq.Done({"n": 2}, "all good")
        if title == "fail":
            raise taskq.Fail("not today", {"why": "asked"})
        raise ValueError("bad input")

    worker = taskq.Worker(client, handler, concurrency=5, lease_seconds=30, wait_seconds=1, handle_signals=False)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        wait_until(
            "every task is finished",
            lambda: all(t["status"] in ("completed", "failed") for t in client.list_tasks(limit=10)["tasks"]),
        )
    finally:
        worker.stop()
        runner.join(10)
    assert not runner.is_alive()

    def last(title: str) -> Dict[str, Any]:
        return history_of(client, ids[title])[-1]

    def task(title: str) -> Dict[str, Any]:
        return dict(client.get_tasks({"task_ids": [ids[title]]})["tasks"][0])

    assert (last("plain")["to_status"], last("plain")["note"]) == ("completed", "done")
    assert task("plain")["output"] == {"echo": "plain"}
    assert (last("none")["to_status"], last("none")["note"]) == ("completed", "done")
    assert (last("done")["note"], task("done")["output"]) == ("all good", {"n": 2})
    assert (last("fail")["to_status"], last("fail")["note"]) == ("failed", "not today")
    assert task("fail")["output"] == {"why": "asked"}
    assert (last("raise")["to_status"], last("raise")["note"]) == ("failed", "ValueError: bad input")
    error = task("raise")["output"]["error"]
    assert error["type"] == "ValueError" and error["message"] == "bad input"
    assert "Traceback" in error["traceback"] and "raise ValueError" in error["traceback"]


def take_over(client: taskq.Client, task_id: str) -> str:
    """Another agent takes the task: it is given back and claimed again
    under a new lease, whose id is answered."""
    client.update_tasks({"updates": [{"task_id": task_id, "status": "pending"}]})
    claimed = client.claim_task({"lease_seconds": 60})
    assert claimed is not None and "task_id" in claimed and claimed["task_id"] == task_id
    return str(claimed["lease_id"])


def test_a_lost_lease_cancels_an_async_handler_and_the_task_stays_with_its_new_holder(
    url: str, client: taskq.Client
) -> None:
    task_id = client.create_tasks({"tasks": [{"title": "long"}]})["results"][0]["task_id"]
    events: List[taskq.WorkerEvent] = []
    cancelled: List[str] = []

    async def main() -> None:
        started = asyncio.Event()

        async def handler(task: Dict[str, Any]) -> Dict[str, Any]:
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(task["task_id"])
                raise
            return {"finished": True}

        async with taskq.AsyncClient(url, client.settings.api_key) as async_client:
            worker = taskq.Worker(
                async_client, handler, lease_seconds=3, wait_seconds=1, handle_signals=False, on_event=events.append
            )
            run = asyncio.ensure_future(worker.run_async())
            await asyncio.wait_for(started.wait(), 10)
            lease = await asyncio.get_running_loop().run_in_executor(None, take_over, client, task_id)
            deadline = time.monotonic() + 5
            while not cancelled:
                assert time.monotonic() < deadline, "the handler was not cancelled"
                await asyncio.sleep(0.05)
            worker.stop()
            await asyncio.wait_for(run, 10)
            # The new holder's lease still holds: its completion applies.
            done = await async_client.update_tasks(
                {"updates": [{"task_id": task_id, "lease_id": lease, "status": "completed", "note": "by the new holder"}]}
            )
            assert done["results"][0]["status"] == "completed"

    asyncio.run(main())
    assert cancelled == [task_id]
    kinds = [e.kind for e in events if e.task_id == task_id]
    assert kinds[0] == "claimed" and kinds[-1] == "lease_lost", kinds
    assert "completed" not in kinds
    completions = [e for e in history_of(client, task_id) if e["to_status"] == "completed"]
    assert [e["note"] for e in completions] == ["by the new holder"]


def test_a_lost_lease_sets_a_sync_handlers_cancelled_flag(client: taskq.Client) -> None:
    task_id = client.create_tasks({"tasks": [{"title": "long"}]})["results"][0]["task_id"]
    started = threading.Event()
    saw_cancel = threading.Event()

    def handler(task: Dict[str, Any]) -> Dict[str, Any]:
        job = taskq.current_job()
        assert job.task_id == task["task_id"]
        started.set()
        if job.cancelled.wait(30):
            saw_cancel.set()
        return {"finished": True}

    worker = taskq.Worker(client, handler, lease_seconds=3, wait_seconds=1, handle_signals=False)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert started.wait(10)
        take_over(client, task_id)
        assert saw_cancel.wait(5), "the handler's cancelled flag was never set"
    finally:
        worker.stop()
        runner.join(10)
    task = client.get_tasks({"task_ids": [task_id]})["tasks"][0]
    # Still held by the agent that took it over, not completed by the worker.
    assert task["status"] == "in_progress"
    assert all(e["to_status"] != "completed" for e in task["history"])


def test_a_worker_with_tags_claims_only_tasks_that_carry_one(client: taskq.Client) -> None:
    client.create_tags({"tags": [{"name": "ui"}, {"name": "db"}]})
    created = client.create_tasks({"tasks": [{"title": "db work", "tags": ["db"]}, {"title": "ui work", "tags": ["ui"]}]})
    other, mine = (r["task_id"] for r in created["results"])
    worker = taskq.Worker(client, lambda task: {"ok": True}, tags=["ui"], concurrency=2, wait_seconds=1, handle_signals=False)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        wait_until("the ui task is completed", lambda: client.get_tasks({"task_ids": [mine]})["tasks"][0]["status"] == "completed")
    finally:
        worker.stop()
        runner.join(10)
    # Both were pending when the worker claimed for two slots: it took only its tag.
    assert [e["to_status"] for e in history_of(client, other)] == ["pending"]
