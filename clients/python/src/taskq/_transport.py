"""How a call reaches the server: URLs, authentication, answers and errors,
and when a call is sent again.

A call is sent again, after the server's `Retry-After`, when the answer is
429 with `Retry-After` (a per-minute limit: nothing was written) or 503
(`org moving` while a cluster moves an org, `overloaded`, `store
unavailable`), and after a short pause when the connection could not be
made. A call whose connection broke after it was sent may have been
applied: it is sent again only when that is harmless (reads, and creates,
whose client-minted ids make a repeat a 409 that the client resolves);
otherwise `InDoubt` is raised. The decisions are pure functions
(`retry_delay`), the sync and async transports only carry them out.

With several nodes whose operators named their public URLs, an answer that
another node forwarded from the org's owner names the owner
(`X-Taskq-Owner`): the client sends its org's calls there from then on,
saving the hop, and goes back to `base_url` when the owner cannot be
reached or answers 503 (the org moved). A call under way at an owner that
broke the connection is sent again there, as the node in front would have
answered it 503 had it forwarded the call. Operator calls and event
streams always go to `base_url`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union
from urllib.parse import quote, urlsplit

import httpx

from ._errors import ApiError, InDoubt

#: How long a call keeps being retried, in seconds, before its last error is raised.
DEFAULT_RETRY_FOR = 300.0
#: The longest single wait between two attempts, whatever `Retry-After` says.
MAX_RETRY_WAIT = 30.0
#: The wait after a refused connection or a 503 without `Retry-After`.
PAUSE = 0.5
DEFAULT_TIMEOUT = 60.0

#: Operations that change nothing, so a call whose answer was lost can be sent again.
READ_ONLY_POSTS = frozenset({"get_tasks", "search_tasks", "wait_for_tasks"})
#: Long polls whose `wait_seconds` defaults to 30 when left out.
WAITS_BY_DEFAULT = frozenset({"wait_for_tasks"})


@dataclass(frozen=True)
class Operation:
    """One operation of the API, as the OpenAPI document describes it."""

    id: str
    method: str
    path: str
    auth: str  # "key", "operator" or "none"
    answer: str  # "json", "text" or "empty"

    @property
    def repeatable(self) -> bool:
        return self.method == "GET" or self.id in READ_ONLY_POSTS


@dataclass(frozen=True)
class Settings:
    """What a client is made with; the worker makes its own async client from it."""

    base_url: str
    api_key: Optional[str] = None
    admin_token: Optional[str] = None
    timeout: float = DEFAULT_TIMEOUT
    retry_for: float = DEFAULT_RETRY_FOR
    user_agent: str = "taskq-client-python"


#: The header that names the org's owner node, on an answer forwarded from it.
OWNER_HEADER = "x-taskq-owner"


def owner_hint(value: Optional[str]) -> Optional[str]:
    """The owner URL an answer names, when it is an http(s) URL of a host."""
    if not value:
        return None
    try:
        parts = urlsplit(value.strip())
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        return None
    return value.strip().rstrip("/")


#: How long an owner that could not be reached is not followed again, in seconds.
SHUN_FOR = 30.0


class Route:
    """Where a client's calls for its org go: `base_url`, or the owner node
    the last forwarded answer named. An owner this client could not reach
    is not followed again for `SHUN_FOR` seconds (its public URL may be out
    of this client's reach), so a call costs at most one failed attempt."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.owner: Optional[str] = None
        self._unreachable: Dict[str, float] = {}

    def base_for(self, operation: Operation) -> str:
        if operation.auth == "key" and self.owner is not None:
            return self.owner
        return self.base_url

    def heard(self, operation: Operation, base: str, status: int, headers: Mapping[str, str]) -> None:
        """After an answer from `base`: follow a hint, or leave an owner
        that no longer serves the org."""
        if operation.auth != "key":
            return
        hint = owner_hint(headers.get(OWNER_HEADER))
        if hint is not None and self._unreachable.get(hint, 0.0) <= time.monotonic():
            self.owner = hint
        elif status == 503 and base == self.owner:
            self.owner = None

    def lost(self, base: str) -> bool:
        """After a broken or refused connection to `base`: whether it was the
        owner, which is left (the next attempt goes to `base_url` at once)."""
        if self.owner is not None and base == self.owner:
            self._unreachable[base] = time.monotonic() + SHUN_FOR
            self.owner = None
            return True
        return False


def build_url(
    settings: Settings, operation: Operation, path: Tuple[str, ...], base: Optional[str] = None
) -> str:
    url = operation.path
    names = [part[1:-1] for part in operation.path.split("/") if part.startswith("{")]
    if len(names) != len(path):
        raise TypeError(f"{operation.id} takes {len(names)} path parameters, got {len(path)}")
    for name, value in zip(names, path):
        url = url.replace("{" + name + "}", quote(value, safe=""))
    return (base or settings.base_url).rstrip("/") + url


def query_string(query: Optional[Mapping[str, Any]]) -> Dict[str, str]:
    """The query parameters that are set, as the server reads them."""
    out: Dict[str, str] = {}
    for name, value in (query or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            out[name] = ",".join(str(v) for v in value)
        else:
            out[name] = str(value)
    return out


def headers_for(settings: Settings, operation: Operation) -> Dict[str, str]:
    headers = {"user-agent": settings.user_agent, "accept": "application/json"}
    if operation.auth == "key":
        if settings.api_key is None:
            raise TypeError(f"{operation.id} needs an api_key")
        headers["x-api-key"] = settings.api_key
    elif operation.auth == "operator":
        if settings.admin_token is None:
            raise TypeError(f"{operation.id} needs an admin_token (the operator token)")
        headers["authorization"] = f"Bearer {settings.admin_token}"
    return headers


def request_timeout(
    settings: Settings, operation: Operation, body: Any, query: Optional[Mapping[str, Any]]
) -> float:
    """A long poll (`wait_seconds`) is held by the server that long on top."""
    wait: Optional[int] = None
    for source in (body, query):
        if isinstance(source, Mapping) and isinstance(source.get("wait_seconds"), int):
            wait = max(wait or 0, source["wait_seconds"])
    if wait is None:
        wait = 30 if operation.id in WAITS_BY_DEFAULT else 0
    return settings.timeout + wait


def retry_after(headers: Mapping[str, str]) -> Optional[float]:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        return None


def retry_delay(status: int, headers: Mapping[str, str]) -> Optional[float]:
    """How long to wait before sending a call again after this answer, or
    `None` when the answer is final."""
    after = retry_after(headers)
    if status == 429:
        # Monthly allowances and tier limits carry no Retry-After: waiting
        # a few seconds changes nothing.
        return None if after is None else min(after, MAX_RETRY_WAIT)
    if status == 503:
        return PAUSE if after is None else min(after, MAX_RETRY_WAIT)
    if status in (502, 504):
        # A balancer in front of a cluster whose node just went away.
        return PAUSE
    return None


def decode(operation: Operation, response: httpx.Response) -> Any:
    if response.status_code >= 300:
        raise ApiError(response.status_code, error_body(response), retry_after(response.headers))
    if operation.answer == "empty":
        return None
    if operation.answer == "text":
        return response.text
    if not response.content:
        return None
    return response.json()


def error_body(response: httpx.Response) -> Dict[str, Any]:
    try:
        body = response.json()
    except (ValueError, json.JSONDecodeError):
        return {"error": response.text or response.reason_phrase}
    if isinstance(body, dict):
        return body
    return {"error": str(body)}


class Attempts:
    """The retry budget of one call."""

    def __init__(self, settings: Settings) -> None:
        self.deadline = time.monotonic() + settings.retry_for
        #: A connection broke after the call was sent: it may have been applied.
        self.in_doubt = False

    def allows(self, wait: float) -> bool:
        return time.monotonic() + wait < self.deadline


def owner_failure(error: httpx.TransportError, attempts: Attempts) -> Optional[BaseException]:
    """After the owner node an answer named broke or refused the connection:
    the call goes to `base_url` at once, as the node in front would have
    answered 503 (the org moving on) for a call under way at a node that
    died; `None`, or the error when the retry budget is spent."""
    if not isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        attempts.in_doubt = True
    return None if attempts.allows(0.0) else error


def transport_failure(
    operation: Operation, error: httpx.TransportError, attempts: Attempts, retried_ok: bool
) -> Union[float, BaseException]:
    """After a broken or refused connection: the wait before the next
    attempt, or the exception to raise."""
    never_sent = isinstance(error, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    if not never_sent:
        attempts.in_doubt = True
        if not (operation.repeatable or retried_ok):
            return InDoubt(operation.id, error)
    if not attempts.allows(PAUSE):
        return error
    return PAUSE


Body = Any
Query = Optional[Mapping[str, Any]]
#: Told of each refusal by a per-minute limit: the operation, the body, the wait.
LimitListener = Callable[[str, Dict[str, Any], float], None]


class SyncTransport:
    """Sends calls with a blocking `httpx.Client`."""

    _settings: Settings
    _http: httpx.Client
    _route: Route

    def _invoke(
        self,
        operation: Operation,
        path: Tuple[str, ...] = (),
        body: Body = None,
        query: Query = None,
        retry_in_doubt: bool = False,
    ) -> Any:
        headers = headers_for(self._settings, operation)
        params = query_string(query)
        timeout = request_timeout(self._settings, operation, body, query)
        attempts = Attempts(self._settings)
        while True:
            base = self._route.base_for(operation)
            try:
                response = self._http.request(
                    operation.method,
                    build_url(self._settings, operation, path, base),
                    headers=headers,
                    params=params,
                    json=body,
                    timeout=timeout,
                )
            except httpx.TransportError as error:
                if self._route.lost(base):
                    failed = owner_failure(error, attempts)
                    if failed is not None:
                        raise failed
                    continue
                outcome = transport_failure(operation, error, attempts, retry_in_doubt)
                if isinstance(outcome, BaseException):
                    raise outcome from error
                time.sleep(outcome)
                continue
            self._route.heard(operation, base, response.status_code, response.headers)
            wait = retry_delay(response.status_code, response.headers)
            if wait is not None and attempts.allows(wait):
                # A 503 may come from a node that lost the org while the
                # call was under way there.
                attempts.in_doubt = attempts.in_doubt or response.status_code != 429
                response.close()
                time.sleep(wait)
                continue
            return self._answer(operation, response, body, attempts)

    def _answer(self, operation: Operation, response: httpx.Response, body: Body, attempts: Attempts) -> Any:
        return decode(operation, response)


class AsyncTransport:
    """Sends calls with an `httpx.AsyncClient`."""

    _settings: Settings
    _http: httpx.AsyncClient
    _route: Route

    async def _invoke(
        self,
        operation: Operation,
        path: Tuple[str, ...] = (),
        body: Body = None,
        query: Query = None,
        retry_in_doubt: bool = False,
    ) -> Any:
        import asyncio

        headers = headers_for(self._settings, operation)
        params = query_string(query)
        timeout = request_timeout(self._settings, operation, body, query)
        attempts = Attempts(self._settings)
        while True:
            base = self._route.base_for(operation)
            try:
                response = await self._http.request(
                    operation.method,
                    build_url(self._settings, operation, path, base),
                    headers=headers,
                    params=params,
                    json=body,
                    timeout=timeout,
                )
            except httpx.TransportError as error:
                if self._route.lost(base):
                    failed = owner_failure(error, attempts)
                    if failed is not None:
                        raise failed
                    continue
                outcome = transport_failure(operation, error, attempts, retry_in_doubt)
                if isinstance(outcome, BaseException):
                    raise outcome from error
                await asyncio.sleep(outcome)
                continue
            self._route.heard(operation, base, response.status_code, response.headers)
            wait = retry_delay(response.status_code, response.headers)
            if wait is not None and attempts.allows(wait):
                attempts.in_doubt = attempts.in_doubt or response.status_code != 429
                if response.status_code == 429:
                    await response.aread()
                    self._heard_limit(operation.id, error_body(response), wait)
                await response.aclose()
                await asyncio.sleep(wait)
                continue
            return await self._answer(operation, response, body, attempts)

    def on_rate_limited(self, listener: LimitListener) -> Callable[[], None]:
        """Calls `listener(operation_id, body, wait)` each time a call is
        refused by a per-minute limit (429 with `Retry-After`) and will be
        sent again after `wait` seconds; `body` is the refusal's
        (`limit_type`, `limit`, `tier`). Answers a function that stops it."""
        listeners = self.__dict__.setdefault("_limit_listeners", [])
        listeners.append(listener)
        return lambda: listeners.remove(listener)

    def _heard_limit(self, operation_id: str, body: Dict[str, Any], wait: float) -> None:
        for listener in list(self.__dict__.get("_limit_listeners", ())):
            listener(operation_id, body, wait)

    async def _answer(
        self, operation: Operation, response: httpx.Response, body: Body, attempts: Attempts
    ) -> Any:
        return decode(operation, response)
