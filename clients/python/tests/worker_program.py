"""A worker process for the black-box tests (tests/clients.rs) and the
measurement script: it works the org of TASKQ_API_KEY at TASKQ_URL and
prints one JSON line per worker event on stdout, `{"kind": "ready"}` first.

Each task's handler sleeps `sleep_ms` from the task's metadata (default
WORKER_SLEEP_MS, 0) and completes it with `{"by": WORKER_NAME}`; a task
whose metadata has `"fail": true` raises, and `"fail_once": true` raises on
its first try (before a retry). Stops on SIGTERM or SIGINT and
exits 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

import taskq  # noqa: E402

name = os.environ.get("WORKER_NAME", f"python-{os.getpid()}")
default_sleep = int(os.environ.get("WORKER_SLEEP_MS", "0"))


def emit(event: taskq.WorkerEvent) -> None:
    line = {"kind": event.kind, "task_id": event.task_id, "at": time.time()}
    if event.error is not None:
        line["error"] = event.error
    print(json.dumps(line), flush=True)


async def handler(task: dict) -> dict:
    metadata = task.get("metadata") or {}
    if metadata.get("fail"):
        raise RuntimeError("asked to fail")
    if metadata.get("fail_once") and task.get("retries") == 0:
        raise RuntimeError("asked to fail once")
    await asyncio.sleep(int(metadata.get("sleep_ms", default_sleep)) / 1000)
    return {"by": name}


def main() -> None:
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
    client = taskq.Client(os.environ["TASKQ_URL"], os.environ["TASKQ_API_KEY"])
    worker = taskq.Worker(
        client,
        handler,
        tags=[t for t in os.environ.get("WORKER_TAGS", "").split(",") if t] or None,
        concurrency=int(os.environ.get("WORKER_CONCURRENCY", "8")),
        lease_seconds=int(os.environ.get("WORKER_LEASE_SECONDS", "60")),
        wait_seconds=int(os.environ.get("WORKER_WAIT_SECONDS", "5")),
        grace_seconds=float(os.environ.get("WORKER_GRACE_SECONDS", "5")),
        include_context=False,
        on_event=emit,
    )
    print(json.dumps({"kind": "ready", "at": time.time()}), flush=True)
    worker.run()


if __name__ == "__main__":
    main()
