"""The taskq client: `Client` (blocking) and `AsyncClient`, one method per
operation of the API, and `Worker`, which claims tasks and runs a handler
on each while it keeps their leases.

    import taskq

    client = taskq.Client("http://127.0.0.1:8080", api_key)

    def handle(task):
        return {"summary": task["title"].upper()}

    taskq.Worker(client, handle, concurrency=8).run()
"""

from ._client import AsyncClient, Client
from ._errors import ApiError, InDoubt
from ._outcome import Done, Fail
from ._transport import Settings
from ._watch import StreamEvent
from ._worker import Job, LeaseLost, Worker, WorkerEvent, current_job

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "Done",
    "Fail",
    "InDoubt",
    "Job",
    "LeaseLost",
    "Settings",
    "StreamEvent",
    "Worker",
    "WorkerEvent",
    "current_job",
]
