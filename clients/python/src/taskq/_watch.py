"""Watching an org without polling (CONTRACT §10): waiting for tasks, and
the event stream as an iterator that outlives its connections.

A stream ends when the server stops or the org moves to another node, and
a connection may drop. The iterator then opens the stream again with
`Last-Event-ID` set to the last event it handed out, so the server
replays exactly what came after it: whoever iterates sees every event
once and in order. An event whose end had not arrived when the
connection went is not handed out; it comes again whole. Opening is
retried as a call is (`retry_delay`: 429 with `Retry-After`, 503, refused
connections, within `retry_for`, counted afresh after every stream that
opened); between two connections the client pauses for the stream's
`retry:` when it sent one.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncGenerator, Dict, Generator, List, Optional, Sequence, Union

import httpx

from ._sse import Message, SseParser
from ._typing import TypedDict
from ._transport import (
    PAUSE,
    Attempts,
    Operation,
    Settings,
    build_url,
    decode,
    headers_for,
    query_string,
    retry_delay,
)

if TYPE_CHECKING:
    from . import models

EVENTS = Operation("watch_events", "GET", "/events", auth="key", answer="text")
#: The server sends a comment this often while nothing happens.
KEEP_ALIVE = 15.0
#: The longest wait one `POST /tasks/wait` may ask for.
MAX_WAIT_SECONDS = 30
#: The name of an event sent without `event:` (a change with no more specific type).
UNNAMED = "task.status_changed"


class StreamBody(TypedDict):
    """The webhook body of a task's transition (`models.EventBody`, whose
    `data` on the stream is always a `TransitionData`)."""

    type: models.EventKind
    timestamp: str
    data: models.TransitionData


@dataclass(frozen=True)
class StreamEvent:
    """One event of the org's stream: `id` (rising within the org), `type`
    (`task.created`, `task.completed`, … or `task.status_changed`) and
    `data`, the webhook body `{type, timestamp, data: {org_id, task_id,
    from_status, to_status, agent_id}}`."""

    id: int
    type: str
    data: StreamBody


def to_event(message: Message) -> StreamEvent:
    if message.id is None or not message.id.isdigit():
        raise ValueError(f"an event without an event id ({message.id!r}): not a taskq stream")
    return StreamEvent(id=int(message.id), type=message.event or UNNAMED, data=json.loads(message.data))


# ------------------------------------------------------------------- waiting


def wait_body(task_ids: Sequence[str], until: str, wait_seconds: int) -> models.WaitTasks:
    if isinstance(task_ids, str):
        raise TypeError("task_ids is a list of ids, not one id")
    body: Dict[str, Any] = {"task_ids": list(task_ids), "until": until, "wait_seconds": wait_seconds}
    return body  # type: ignore[return-value]


def next_wait_seconds(deadline: Optional[float], now: float) -> int:
    """How long the next wait of a loop with this deadline asks for: whole
    seconds, rounded up, so the loop ends at most a second late."""
    if deadline is None:
        return MAX_WAIT_SECONDS
    return max(0, min(MAX_WAIT_SECONDS, math.ceil(deadline - now)))


def waiting_is_over(answer: models.WaitAnswer, deadline: Optional[float], now: float) -> bool:
    """Whether a loop of waits stops at this answer: done, the deadline has
    passed, or none of the ids is a task (nothing can change then)."""
    return answer["done"] or not answer["tasks"] or (deadline is not None and now >= deadline)


def deadline_after(timeout: Optional[float]) -> Optional[float]:
    return None if timeout is None else time.monotonic() + timeout


# -------------------------------------------------------------- the stream


def listed(values: Union[str, Sequence[str], None]) -> Optional[str]:
    """A filter as the query takes it: comma-separated."""
    if values is None or isinstance(values, str):
        return values
    return ",".join(values)


class Cursor:
    """Where a stream resumes: `since` until an event was handed out, then
    `Last-Event-ID` of the last one."""

    def __init__(
        self,
        settings: Settings,
        since: Optional[int],
        types: Union[str, Sequence[str], None],
        task_ids: Union[str, Sequence[str], None],
    ) -> None:
        self.url = build_url(settings, EVENTS, ())
        self._headers = headers_for(settings, EVENTS)
        self._headers["accept"] = "text/event-stream"
        self._headers["cache-control"] = "no-cache"
        self._query: Dict[str, Any] = {"types": listed(types), "task_id": listed(task_ids)}
        self.since = since
        self.last_id: Optional[int] = None
        self.retry: Optional[float] = None
        # The server holds a quiet stream open with a comment every 15 s.
        self.timeout = httpx.Timeout(settings.timeout, read=max(settings.timeout, 2 * KEEP_ALIVE))

    def headers(self) -> Dict[str, str]:
        headers = dict(self._headers)
        if self.last_id is not None:
            headers["last-event-id"] = str(self.last_id)
        return headers

    def params(self) -> Dict[str, str]:
        query = dict(self._query)
        if self.last_id is None:
            query["since"] = self.since
        return query_string(query)

    def read(self, parser: SseParser, chunk: bytes) -> List[StreamEvent]:
        """The events `chunk` finishes."""
        messages = parser.feed(chunk)
        if parser.retry_ms is not None:
            self.retry = parser.retry_ms / 1000
        return [to_event(message) for message in messages]

    def handed_out(self, event: StreamEvent) -> None:
        self.last_id = event.id

    def pause(self) -> float:
        """The pause before the next connection."""
        return PAUSE if self.retry is None else self.retry


def refused_open(response: httpx.Response, attempts: Attempts) -> float:
    """After a stream that did not open: the wait before trying again, or
    the `ApiError` raised."""
    wait = retry_delay(response.status_code, response.headers)
    if wait is not None and attempts.allows(wait):
        return wait
    decode(EVENTS, response)
    raise AssertionError("decode raises for every status but 2xx")


def broken(error: httpx.TransportError, attempts: Attempts, cursor: Cursor) -> float:
    """After a connection that failed or broke: the pause before the next,
    or the error raised when the retries ran out."""
    if not attempts.allows(cursor.pause()):
        raise error
    return cursor.pause()


def read_events(
    http: httpx.Client,
    settings: Settings,
    since: Optional[int],
    types: Union[str, Sequence[str], None],
    task_ids: Union[str, Sequence[str], None],
) -> Generator[StreamEvent, None, None]:
    cursor = Cursor(settings, since, types, task_ids)
    attempts = Attempts(settings)
    while True:
        try:
            with http.stream(
                "GET", cursor.url, headers=cursor.headers(), params=cursor.params(), timeout=cursor.timeout
            ) as response:
                if response.status_code != 200:
                    response.read()
                    pause = refused_open(response, attempts)
                else:
                    attempts = Attempts(settings)
                    parser = SseParser()
                    for chunk in response.iter_bytes():
                        for event in cursor.read(parser, chunk):
                            cursor.handed_out(event)
                            yield event
                    pause = cursor.pause()
        except httpx.TransportError as error:
            pause = broken(error, attempts, cursor)
        time.sleep(pause)


async def aread_events(
    http: httpx.AsyncClient,
    settings: Settings,
    since: Optional[int],
    types: Union[str, Sequence[str], None],
    task_ids: Union[str, Sequence[str], None],
) -> AsyncGenerator[StreamEvent, None]:
    cursor = Cursor(settings, since, types, task_ids)
    attempts = Attempts(settings)
    while True:
        try:
            async with http.stream(
                "GET", cursor.url, headers=cursor.headers(), params=cursor.params(), timeout=cursor.timeout
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    pause = refused_open(response, attempts)
                else:
                    attempts = Attempts(settings)
                    parser = SseParser()
                    async for chunk in response.aiter_bytes():
                        for event in cursor.read(parser, chunk):
                            cursor.handed_out(event)
                            yield event
                    pause = cursor.pause()
        except httpx.TransportError as error:
            pause = broken(error, attempts, cursor)
        await asyncio.sleep(pause)
