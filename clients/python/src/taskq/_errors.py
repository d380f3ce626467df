"""The errors a call raises."""

from __future__ import annotations

from typing import Any, Dict, Optional


class ApiError(Exception):
    """The server answered with an error status (after any retries).

    `status` is the HTTP status and `body` the JSON error body, whose
    `error` string says what went wrong (CONTRACT: every error body has one).
    """

    def __init__(self, status: int, body: Dict[str, Any], retry_after: Optional[float] = None) -> None:
        self.status = status
        self.body = body
        self.retry_after = retry_after
        super().__init__(f"{status}: {self.error}")

    @property
    def error(self) -> str:
        value = self.body.get("error")
        return value if isinstance(value, str) else repr(self.body)


class InDoubt(Exception):
    """The connection broke after the call was sent, so the server may or
    may not have applied it; the call was not sent again because repeating
    it could apply it twice."""

    def __init__(self, operation: str, cause: BaseException) -> None:
        self.operation = operation
        self.cause = cause
        super().__init__(f"{operation}: the connection broke after the call was sent ({cause!r})")
