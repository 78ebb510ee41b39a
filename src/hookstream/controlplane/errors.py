"""The control plane's one error type: a status, a stable code, a message and the field it is about.

Every refusal the control plane makes is one of these; ``hookstream.api.problems`` maps
it to an answer (JSON ``{"error": {"code": ..., "message": ..., "field": ...}}``, or a
console page).
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


def invalid(field: str, message: str) -> ApiError:
    """400 naming the field (a body field, a query parameter or a path parameter)."""
    return ApiError(400, "invalid_request", f"{field}: {message}", field)


def not_found(what: str) -> ApiError:
    # Also the answer for another tenant's resources: existence must not leak.
    return ApiError(404, "not_found", f"{what} not found")


def conflict(message: str, field: str | None = None) -> ApiError:
    return ApiError(409, "conflict", message, field)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


def unavailable(message: str) -> ApiError:
    return ApiError(503, "unavailable", message)
