"""What a handler's result becomes: the update item that finishes its task.

Returning a dict (or None) completes the task with that output and the note
`done`; returning `Done(output, note)` sets both; raising `Fail(note,
output)` fails it with those; any other exception fails it with the
exception's type and message as the note and its traceback in the output.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

#: The server takes notes and outputs up to 65,536 bytes (CONTRACT §5).
MAX_NOTE_CHARS = 2000
MAX_TRACEBACK_CHARS = 32000
RELEASE_NOTE = "released by worker"


@dataclass
class Done:
    """A handler's result that sets both the output and the note."""

    output: Optional[Mapping[str, Any]] = None
    note: str = "done"


class Fail(Exception):
    """Raised by a handler to fail its task with this note (and output)."""

    def __init__(self, note: str, output: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(note)
        self.note = note
        self.output = output


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def completion(task_id: str, lease_id: str, result: Any) -> Dict[str, Any]:
    """The update item for a handler that returned `result`."""
    if isinstance(result, Done):
        return finish(task_id, lease_id, "completed", result.note or "done", result.output)
    if result is None or isinstance(result, Mapping):
        return finish(task_id, lease_id, "completed", "done", result)
    return finish(
        task_id,
        lease_id,
        "failed",
        f"TypeError: the handler returned {type(result).__name__}; return a dict, None or taskq.Done",
        None,
    )


def failure(task_id: str, lease_id: str, error: BaseException) -> Dict[str, Any]:
    """The update item for a handler that raised `error`."""
    if isinstance(error, Fail):
        return finish(task_id, lease_id, "failed", error.note or "failed", error.output)
    name = type(error).__name__
    message = str(error)
    note = f"{name}: {message}" if message else name
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    output = {
        "error": {
            "type": name,
            "message": clip(message, MAX_NOTE_CHARS),
            "traceback": clip(trace, MAX_TRACEBACK_CHARS),
        }
    }
    return finish(task_id, lease_id, "failed", note, output)


def finish(
    task_id: str, lease_id: str, status: str, note: str, output: Optional[Mapping[str, Any]]
) -> Dict[str, Any]:
    item: Dict[str, Any] = {
        "task_id": task_id,
        "lease_id": lease_id,
        "status": status,
        "note": clip(note, MAX_NOTE_CHARS),
    }
    if output is not None:
        item["output"] = dict(output)
    return item


def release(task_id: str, lease_id: str) -> Dict[str, Any]:
    """Gives a task back to `pending` when the worker stops before its handler."""
    return {"task_id": task_id, "lease_id": lease_id, "status": "pending", "note": RELEASE_NOTE}


def renewal(task_id: str, lease_id: str) -> Dict[str, Any]:
    """An update with nothing but the lease: the server extends it."""
    return {"task_id": task_id, "lease_id": lease_id}


def without_output(item: Mapping[str, Any], why: str) -> Dict[str, Any]:
    """A finishing item the server refused (an output too large, say),
    turned into a failure it will take."""
    return finish(
        str(item["task_id"]),
        str(item["lease_id"]),
        "failed",
        f"the worker's update was refused: {why}",
        None,
    )
