"""The one mapping from what a handler raised to what the caller is told: a status, a
stable code and a message. The JSON API renders it as ``{"error": {...}}``
(``middleware``), the console as an HTML page (``console.mount``).

The control plane's refusals (``ApiError``) pass as they are; aiohttp's own (no such
route, wrong method, body too large) get a code; a database or Kafka that cannot be
reached is 503; values the database refused are 400 (its own words stay in the log:
they may name tables); anything else is 500, logged with its traceback. Call
``problem_of`` inside the ``except`` block, so that traceback is the one logged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from hookstream.controlplane.errors import ApiError
from hookstream.io.kafka import BrokerUnavailable
from hookstream.io.pg import DatabaseUnavailable, DataRejected

HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


@dataclasses.dataclass(frozen=True)
class Problem:
    status: int
    code: str
    message: str  # the JSON API's words
    field: str | None = None
    page_message: str | None = None  # the console's words, where a person reads them
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}

    @property
    def for_people(self) -> str:
        return self.page_message if self.page_message is not None else self.message


def problem_of(exc: Exception, request: web.Request, log: logging.Logger) -> Problem:
    if isinstance(exc, ApiError):
        return Problem(exc.status, exc.code, exc.message, exc.field)
    if isinstance(exc, web.HTTPException):
        allow = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else {}
        return Problem(exc.status, HTTP_CODES.get(exc.status, "http_error"), exc.reason,
                       headers=allow)
    if isinstance(exc, DatabaseUnavailable | BrokerUnavailable):
        log.warning("dependency unavailable", extra={"error": str(exc)})
        return Problem(503, "unavailable",
                       "a dependency (database or Kafka) is unavailable; retry later",
                       page_message="The database or Kafka is unavailable; retry in a moment.")
    if isinstance(exc, DataRejected):
        # Validation should have caught it; the caller learns it was the request's values.
        log.warning("request values refused by the database",
                    extra={"path": request.path, "error": str(exc)})
        return Problem(400, "invalid_request",
                       "a value in the request cannot be stored (e.g. a NUL character)",
                       page_message="A value in the form cannot be stored (e.g. a NUL"
                                    " character).")
    log.exception("unhandled error", extra={"path": request.path})
    return Problem(500, "internal", "internal error", page_message="Internal error.")
