"""The exceptions the client raises.

Every error answer of `revenant serve` is JSON, `{"error": {"code", "message",
"field"?}}`; the client raises it as a `RevenantError` subclass chosen by its code, so
callers catch what they mean (`except LeaseLost`, `except NotFound`) and still see the
server's words (`err.code`, `err.message`, `err.field`, `err.status`).

A request that never got an answer (connection refused, a timeout, a reset) is
`Unreachable`, with `status` None. `retryable` says whether the same request may pass
later unchanged: an unreachable server or a busy store (`503 store_unavailable`).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class RevenantError(Exception):
    """An error answer of the API, or a request that got none (`Unreachable`).

    `status` is the HTTP status (None when no answer came), `code` the API's stable
    error code (`invalid_field`, `not_found`, `lease_lost`, ...), `message` its text
    for people, `field` the request field at fault when the server names one.
    """

    def __init__(
        self,
        status: Optional[int],
        code: str,
        message: str,
        field: Optional[str] = None,
    ) -> None:
        where = f" ({field})" if field else ""
        head = f"{status} {code}" if status is not None else code
        super().__init__(f"{head}{where}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    @property
    def retryable(self) -> bool:
        """Whether the same request may pass later, unchanged."""
        return False


class InvalidRequest(RevenantError):
    """400: the body is not JSON (`invalid_json`), a field or parameter is wrong
    (`invalid_field`, `field` names it: `jobs[2].priority`), or the request could not
    be read (`bad_request`). Nothing was written."""


class Unauthorized(RevenantError):
    """401: no token, or one the server does not know."""


class Forbidden(RevenantError):
    """403: the token lacks the route's scope or the job's queue, or the queue refuses
    the kind (`field` says which: `queue`, `kind`, `jobs[1].kind`)."""


class NotFound(RevenantError):
    """404: no such job, dead job, dependency, stored policy or route."""


class LeaseLost(RevenantError):
    """409 `lease_lost`: the job is no longer running under this lease token (the lease
    expired and another worker took it, or an operator cancelled it). Nothing changed:
    drop the job, do not retry the call."""


class Conflict(RevenantError):
    """409 `conflict`: the job's state does not allow it (cancelling a finished job)."""


class PayloadTooLarge(RevenantError):
    """413: the body is over the server's `--max-body`."""


class StoreUnavailable(RevenantError):
    """503 `store_unavailable`: the database cannot be reached or is busy; retry."""

    @property
    def retryable(self) -> bool:
        return True


class StoreError(RevenantError):
    """503 `store_error`: the database failed in a way retrying will not fix."""


class Unreachable(RevenantError):
    """No answer: the connection failed, was reset, or the request timed out
    (`code` is `unreachable` or `timeout`). The request may or may not have been
    applied; every call the client makes is safe to repeat except an enqueue without
    a `unique_key`, which may then enqueue twice."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(None, code, message)

    @property
    def retryable(self) -> bool:
        return True


class ProtocolError(RevenantError):
    """An answer the client cannot read: not JSON, or JSON without the fields the API
    promises (a proxy's HTML error page, a server of another version)."""


_BY_CODE: Dict[str, Type[RevenantError]] = {
    "invalid_json": InvalidRequest,
    "invalid_field": InvalidRequest,
    "bad_request": InvalidRequest,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "lease_lost": LeaseLost,
    "conflict": Conflict,
    "payload_too_large": PayloadTooLarge,
    "store_unavailable": StoreUnavailable,
    "store_error": StoreError,
}

_BY_STATUS: Dict[int, Type[RevenantError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    413: PayloadTooLarge,
    503: StoreUnavailable,
}


def from_answer(status: int, body: bytes) -> RevenantError:
    """The exception for an error answer: by the API's code when the body is the
    API's JSON error, else by the HTTP status alone (code `http_STATUS`)."""
    import json

    try:
        error: Any = json.loads(body)["error"]
        code = str(error["code"])
        message = str(error["message"])
        field = error.get("field")
        field = str(field) if field is not None else None
    except (ValueError, KeyError, TypeError):
        text = body.decode("utf-8", "replace").strip()[:200]
        cls = _BY_STATUS.get(status, RevenantError)
        return cls(status, f"http_{status}", text or "an error answer without a body")
    return _BY_CODE.get(code, RevenantError)(status, code, message, field)
