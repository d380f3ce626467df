"""`taskq.Client` and `taskq.AsyncClient`: the generated operations over a
transport, plus what the document cannot say.

- Creates carry client-minted ids (a v4 UUID for every item without one),
  so a create sent again after a lost answer cannot make a task twice: the
  repeat answers 409 `task_id already exists`, and when every id of the
  call exists with its title the call is answered as the first attempt
  would have been.
- `wait(...)` is `POST /tasks/wait` with its arguments spelled out, and
  `wait_until_done(...)` a loop of them up to an overall `timeout`.
- `events(...)` reads `GET /events`, which the document cannot type (a
  stream of Server-Sent Events), and resumes it with `Last-Event-ID`
  whenever it ends (`_watch.py`).
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, AsyncGenerator, Dict, Generator, List, Optional, Sequence, Union, cast

import httpx

from ._errors import ApiError
from ._operations import AsyncOperations, SyncOperations
from ._transport import (
    DEFAULT_RETRY_FOR,
    DEFAULT_TIMEOUT,
    Attempts,
    Operation,
    Route,
    Settings,
    decode,
)
from ._watch import (
    StreamEvent,
    aread_events,
    deadline_after,
    next_wait_seconds,
    read_events,
    wait_body,
    waiting_is_over,
)

if TYPE_CHECKING:
    from . import models

CREATE = "create_tasks"


def with_minted_ids(body: models.CreateTasks) -> models.CreateTasks:
    """The create body with a task_id on every item that has none."""
    items = [dict(item) for item in body["tasks"]]
    for item in items:
        if not item.get("task_id"):
            item["task_id"] = str(uuid.uuid4())
    minted = dict(body)
    minted["tasks"] = items
    return minted  # type: ignore[return-value]


def is_repeat_of_created(operation: Operation, response: httpx.Response, attempts: Attempts) -> bool:
    """A create sent again after its first attempt may have landed, now
    refused because its ids exist."""
    if operation.id != CREATE or not attempts.in_doubt or response.status_code != 409:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("task_id"), str)


def answer_from_existing(body: models.CreateTasks, found: models.GetAnswer) -> Optional[models.CreateAnswer]:
    """The create's answer rebuilt from the tasks as stored, when every item
    of the call is there with its title (else the 409 was not ours)."""
    by_id = {task["task_id"]: task for task in found["tasks"]}
    results: List[Dict[str, Any]] = []
    for item in body["tasks"]:
        task = by_id.get(str(item.get("task_id")))
        if task is None or task.get("title") != item.get("title"):
            return None
        results.append(
            {
                "ref": item.get("ref"),
                "task_id": task["task_id"],
                "status": task["status"],
                "created_at": task["created_at"],
            }
        )
    answer: Dict[str, Any] = {"created": len(results), "results": results}
    return cast("models.CreateAnswer", answer)


def get_body(body: models.CreateTasks) -> models.GetTasks:
    return {"task_ids": [str(item.get("task_id")) for item in body["tasks"]]}


def _settings(
    base_url: str,
    api_key: Optional[str],
    admin_token: Optional[str],
    timeout: float,
    retry_for: float,
) -> Settings:
    return Settings(
        base_url=base_url,
        api_key=api_key,
        admin_token=admin_token,
        timeout=timeout,
        retry_for=retry_for,
    )


class Client(SyncOperations):
    """A blocking client: `Client(base_url, api_key)`; `admin_token` for
    the operator's operations (`/admin/*`, `metrics`)."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        admin_token: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        http: Optional[httpx.Client] = None,
    ) -> None:
        self._settings = _settings(base_url, api_key, admin_token, timeout, retry_for)
        self._route = Route(base_url)
        self._owns_http = http is None
        self._http = http if http is not None else httpx.Client()

    @property
    def settings(self) -> Settings:
        return self._settings

    def create_tasks(self, body: models.CreateTasks) -> models.CreateAnswer:
        """POST /tasks: create 1 to 25 tasks, each with a client-minted id."""
        from ._operations import OPERATIONS

        minted = with_minted_ids(body)
        answer = self._invoke(OPERATIONS[CREATE], body=minted, retry_in_doubt=True)
        return answer  # type: ignore[no-any-return]

    def wait(
        self, task_ids: Sequence[str], until: models.WaitUntil = "all", wait_seconds: int = 30
    ) -> models.WaitAnswer:
        """POST /tasks/wait: answers as soon as all (or any) of 1 to 25 tasks
        are finished, or after `wait_seconds` (0 to 30) with `done` False."""
        return self.wait_for_tasks(wait_body(task_ids, until, wait_seconds))

    def wait_until_done(
        self, task_ids: Sequence[str], until: models.WaitUntil = "all", timeout: Optional[float] = None
    ) -> models.WaitAnswer:
        """Waits again and again until all (or any) of the tasks are finished
        or `timeout` seconds (None: no limit) have passed; answers the last
        answer, whose `done` says which."""
        deadline = deadline_after(timeout)
        while True:
            answer = self.wait(task_ids, until, next_wait_seconds(deadline, time.monotonic()))
            if waiting_is_over(answer, deadline, time.monotonic()):
                return answer

    def events(
        self,
        since: Optional[int] = None,
        types: Union[str, Sequence[str], None] = None,
        task_ids: Union[str, Sequence[str], None] = None,
    ) -> Generator[StreamEvent, None, None]:
        """GET /events: the org's task transitions, in order, for as long as
        it is iterated, reconnecting by itself without a gap or a repeat.
        `since`: start after that event id (None: with the next event);
        `types` and `task_ids` keep only those."""
        return read_events(self._http, self._settings, since, types, task_ids)

    def _answer(self, operation: Operation, response: httpx.Response, body: Any, attempts: Attempts) -> Any:
        if is_repeat_of_created(operation, response, attempts):
            found = self.get_tasks(get_body(body))
            rebuilt = answer_from_existing(body, found)
            if rebuilt is not None:
                return rebuilt
        return decode(operation, response)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(AsyncOperations):
    """The same operations as coroutines: `AsyncClient(base_url, api_key)`."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        *,
        admin_token: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        http: Optional[httpx.AsyncClient] = None,
        max_connections: int = 100,
    ) -> None:
        self._settings = _settings(base_url, api_key, admin_token, timeout, retry_for)
        self._route = Route(base_url)
        self._owns_http = http is None
        self._http = (
            http
            if http is not None
            else httpx.AsyncClient(
                limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
            )
        )

    @classmethod
    def from_settings(cls, settings: Settings, max_connections: int = 100) -> AsyncClient:
        return cls(
            settings.base_url,
            settings.api_key,
            admin_token=settings.admin_token,
            timeout=settings.timeout,
            retry_for=settings.retry_for,
            max_connections=max_connections,
        )

    @property
    def settings(self) -> Settings:
        return self._settings

    async def create_tasks(self, body: models.CreateTasks) -> models.CreateAnswer:
        """POST /tasks: create 1 to 25 tasks, each with a client-minted id."""
        from ._operations import OPERATIONS

        minted = with_minted_ids(body)
        answer = await self._invoke(OPERATIONS[CREATE], body=minted, retry_in_doubt=True)
        return answer  # type: ignore[no-any-return]

    async def wait(
        self, task_ids: Sequence[str], until: models.WaitUntil = "all", wait_seconds: int = 30
    ) -> models.WaitAnswer:
        """POST /tasks/wait: answers as soon as all (or any) of 1 to 25 tasks
        are finished, or after `wait_seconds` (0 to 30) with `done` False."""
        return await self.wait_for_tasks(wait_body(task_ids, until, wait_seconds))

    async def wait_until_done(
        self, task_ids: Sequence[str], until: models.WaitUntil = "all", timeout: Optional[float] = None
    ) -> models.WaitAnswer:
        """Waits again and again until all (or any) of the tasks are finished
        or `timeout` seconds (None: no limit) have passed; answers the last
        answer, whose `done` says which."""
        deadline = deadline_after(timeout)
        while True:
            answer = await self.wait(task_ids, until, next_wait_seconds(deadline, time.monotonic()))
            if waiting_is_over(answer, deadline, time.monotonic()):
                return answer

    def events(
        self,
        since: Optional[int] = None,
        types: Union[str, Sequence[str], None] = None,
        task_ids: Union[str, Sequence[str], None] = None,
    ) -> AsyncGenerator[StreamEvent, None]:
        """GET /events as an async generator (see `Client.events`); close it
        (`contextlib.aclosing`) to close its stream at once."""
        return aread_events(self._http, self._settings, since, types, task_ids)

    async def _answer(self, operation: Operation, response: httpx.Response, body: Any, attempts: Attempts) -> Any:
        if is_repeat_of_created(operation, response, attempts):
            found = await self.get_tasks(get_body(body))
            rebuilt = answer_from_existing(body, found)
            if rebuilt is not None:
                return rebuilt
        return decode(operation, response)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


__all__ = ["ApiError", "AsyncClient", "Client"]
