"""A fleet on an org as the README makes it: the `dev` tier's 30 writes a
minute, no limit lifted. Ten Python worker processes, each with a key of
its own and concurrency 4 (30 s leases), work 200 tasks of which one in ten
fails once under a retry policy. Prints how the tasks ended, how often the
handler ran, how long it took, and the workers' lines about the limit.

Usage: python3 clients/fleet.py [--bin target/release/taskq] [--tasks 200]
       [--workers 10] [--python PYTHON]

`--python` is the one the workers run on (it needs httpx); the script
itself uses only the standard library.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import call, start_server  # noqa: E402

TOKEN = f"fleet-{uuid.uuid4().hex}"


def open_tasks(url: str, org_id: str) -> int:
    stats = call(url, "GET", "/admin/stats", None, {"authorization": f"Bearer {TOKEN}"})
    for org in stats["orgs"]:
        if org["org_id"] == org_id and org.get("tasks"):
            return int(org["tasks"]["pending"]) + int(org["tasks"]["in_progress"])
    return -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.path.join(HERE, "..", "target", "release", "taskq"))
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="taskq-fleet-") as scratch:
        server, url = start_server(args.bin, scratch, TOKEN)
        try:
            run(url, args)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)


def run(url: str, args: argparse.Namespace) -> None:
    admin = {"authorization": f"Bearer {TOKEN}"}
    n = uuid.uuid4().hex[:8]
    org = call(url, "POST", "/admin/orgs", {"name": f"fleet-{n}", "owner_email": f"o-{n}@example.com"}, admin)
    org_id, owner = str(org["org_id"]), str(org["owner"]["api_key"])
    keys = [call(url, "POST", "/keys", {"name": f"worker-{i}"}, {"x-api-key": owner})["api_key"] for i in range(args.workers)]
    for start in range(0, args.tasks, 25):
        items = []
        for i in range(start, min(args.tasks, start + 25)):
            item: Dict[str, object] = {"title": f"task {i}", "metadata": {"sleep_ms": 1000}}
            if i % 10 == 0:
                item["metadata"] = {"sleep_ms": 1000, "fail_once": True}
                item["retry"] = {"max_retries": 1, "backoff_seconds": 1}
            items.append(item)
        call(url, "POST", "/tasks", {"tasks": items}, {"x-api-key": owner})
    events: List[dict] = []
    logs: List[List[str]] = [[] for _ in keys]
    began = time.monotonic()
    workers = []
    for i, key in enumerate(keys):
        env = dict(os.environ, TASKQ_URL=url, TASKQ_API_KEY=key, WORKER_NAME=f"worker-{i}",
                   WORKER_CONCURRENCY="4", WORKER_LEASE_SECONDS="30", WORKER_WAIT_SECONDS="20")
        worker = subprocess.Popen([args.python, os.path.join(HERE, "python", "tests", "worker_program.py")],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=lambda w=worker: events.extend(json.loads(line) for line in w.stdout), daemon=True).start()
        threading.Thread(target=lambda w=worker, log=logs[i]: log.extend(w.stderr), daemon=True).start()
        workers.append(worker)
    while open_tasks(url, org_id) != 0:
        time.sleep(1)
        for i, worker in enumerate(workers):
            if worker.poll() is not None:
                raise SystemExit(f"worker-{i} exited with {worker.returncode}:\n{''.join(logs[i])}")
    elapsed = time.monotonic() - began
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(60)
    time.sleep(0.5)
    runs = collections.Counter(e["task_id"] for e in events if e["kind"] == "claimed")
    ended = collections.Counter(e["kind"] for e in events if e["kind"] in ("completed", "failed", "lease_lost", "error"))
    lifted = {k: None for k in ("writes_per_minute", "reads_per_minute", "requests_per_month", "tasks_per_month")}
    call(url, "PATCH", f"/admin/orgs/{org_id}", {"limits": lifted}, admin)
    statuses: collections.Counter = collections.Counter()
    cursor = None
    while True:
        page = call(url, "GET", "/tasks?limit=100" + (f"&cursor={urllib.parse.quote(cursor)}" if cursor else ""), None, {"x-api-key": owner})
        statuses.update(t["status"] for t in page["tasks"])
        cursor = page.get("next_cursor")
        if not cursor:
            break
    lines = [line.rstrip() for log in logs for line in log]
    print(json.dumps({
        "tasks": args.tasks,
        "workers": args.workers,
        "minutes": round(elapsed / 60, 2),
        "statuses": dict(statuses),
        "handler_runs": sum(runs.values()),
        "tasks_run_more_than_twice": sum(1 for c in runs.values() if c > 2),
        "worker_events": dict(ended),
        "limit_lines": sum(1 for line in lines if "rate limited" in line),
        "lease_lost_lines": sum(1 for line in lines if "lease lost" in line),
    }), flush=True)
    for line in [line for line in lines if "rate limited" in line][:5]:
        print(line)


if __name__ == "__main__":
    main()
