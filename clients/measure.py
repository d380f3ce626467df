"""What the client libraries cost: one worker process of each library at
concurrency 64 on one org works a backlog of tasks (claim and complete, a
handler that does nothing), on a server of its own. Prints, for each, the
cycles per second and the CPU time per cycle of the worker process and of
the server.

Usage: python3 clients/measure.py [--bin target/release/taskq] [--tasks 5000]
       [--python PYTHON] [--node NODE] [--concurrency 64]

Run it on a quiet machine (it uses both cores); TypeScript needs `npm ci &&
npm run build:test` in clients/typescript first. Only the standard library
is used, so any Python 3.9+ runs it; `--python` is the one the Python
worker runs on (it needs httpx).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
TICKS = os.sysconf("SC_CLK_TCK")


def call(url: str, method: str, path: str, body: Any = None, headers: Optional[Dict[str, str]] = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method, headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = answer.read()
    return json.loads(text) if text else None


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_server(binary: str, scratch: str, token: str) -> "tuple[subprocess.Popen[bytes], str]":
    env = dict(os.environ, TASKQ_ADMIN_TOKEN=token, TASKQ_EMBEDDINGS="none", TASKQ_REPORTS_SCHEDULE="off")
    server = subprocess.Popen(
        [os.path.abspath(binary), "serve", "--listen", "127.0.0.1:0", "--database-url", f"sqlite://{scratch}/taskq.db"],
        cwd=scratch,
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(scratch, "server.log"), "wb"),
    )
    assert server.stdout is not None
    line = server.stdout.readline().decode()
    if not line.startswith("taskq listening on "):
        raise SystemExit(f"the server did not start: {line!r}")
    return server, line.split()[-1]


def new_org(url: str, token: str) -> "tuple[str, str]":
    admin = {"authorization": f"Bearer {token}"}
    n = uuid.uuid4().hex[:8]
    org = call(url, "POST", "/admin/orgs", {"name": f"measure-{n}", "owner_email": f"o-{n}@example.com"}, admin)
    limits = {k: None for k in ("writes_per_minute", "reads_per_minute", "requests_per_month", "tasks_per_month")}
    call(url, "PATCH", f"/admin/orgs/{org['org_id']}", {"limits": limits}, admin)
    return str(org["org_id"]), str(org["owner"]["api_key"])


def open_tasks(url: str, org_id: str) -> int:
    """The org's pending and in-progress tasks, from the operator's figures
    (read from memory, so polling them costs the server next to nothing)."""
    stats = call(url, "GET", "/admin/stats", None, {"authorization": f"Bearer {TOKEN}"})
    for org in stats["orgs"]:
        if org["org_id"] == org_id and org.get("tasks"):
            return int(org["tasks"]["pending"]) + int(org["tasks"]["in_progress"])
    return -1


def requests_by_route(url: str) -> Dict[str, int]:
    """The worker's requests so far by route (`/metrics`), without the
    set-up's and the polling's."""
    request = urllib.request.Request(url + "/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        text = answer.read().decode()
    out: Dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith("taskq_http_requests_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        route = labels.split('route="', 1)[1].split('"', 1)[0]
        if route in ("/tasks/claim", "/tasks/update"):
            out[route] = out.get(route, 0) + int(float(value))
    return out


TOKEN = f"measure-{uuid.uuid4().hex}"


def measure(lang: str, command: List[str], args: argparse.Namespace) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="taskq-measure-") as scratch:
        server, url = start_server(args.bin, scratch, TOKEN)
        try:
            org_id, key = new_org(url, TOKEN)
            for start in range(0, args.tasks, 25):
                items = [{"title": f"task {i}"} for i in range(start, min(args.tasks, start + 25))]
                call(url, "POST", "/tasks", {"tasks": items}, {"x-api-key": key})
            env = dict(
                os.environ,
                TASKQ_URL=url,
                TASKQ_API_KEY=key,
                WORKER_CONCURRENCY=str(args.concurrency),
                WORKER_LEASE_SECONDS="60",
            )
            server_cpu = cpu_seconds(server.pid)
            began = time.monotonic()
            worker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while open_tasks(url, org_id) != 0:
                time.sleep(0.2)
                if worker.poll() is not None:
                    raise SystemExit(f"the {lang} worker exited with {worker.returncode}")
            elapsed = time.monotonic() - began
            server_cpu = cpu_seconds(server.pid) - server_cpu
            requests = requests_by_route(url)
            worker.send_signal(signal.SIGTERM)
            _, status, usage = os.wait4(worker.pid, 0)
            worker.returncode = os.waitstatus_to_exitcode(status)
            worker_cpu = usage.ru_utime + usage.ru_stime
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    return {
        "library": lang,
        "tasks": args.tasks,
        "concurrency": args.concurrency,
        "seconds": round(elapsed, 2),
        "cycles_per_second": round(args.tasks / elapsed, 1),
        "worker_cpu_ms_per_cycle": round(1000 * worker_cpu / args.tasks, 3),
        "server_cpu_ms_per_cycle": round(1000 * server_cpu / args.tasks, 3),
        "requests_per_cycle": {route: round(n / args.tasks, 3) for route, n in requests.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", default=os.path.join(HERE, "..", "target", "release", "taskq"))
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--node", default="node")
    args = parser.parse_args()
    runs = [
        ("python", [args.python, os.path.join(HERE, "python", "tests", "worker_program.py")]),
        ("typescript", [args.node, os.path.join(HERE, "typescript", "dist-test", "programs", "worker_program.js")]),
    ]
    for lang, command in runs:
        print(json.dumps(measure(lang, command, args)), flush=True)


if __name__ == "__main__":
    main()
