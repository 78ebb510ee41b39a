"""A small synchronous client of the control-plane API, for the command line.

Standard library only (``urllib``): a command makes a handful of requests, one at a
time, so a connection pool or an event loop would buy nothing. Errors come back as two
types: ``ApiUnreachable`` (nothing answered: wrong URL, fanout down, timeout) and
``ApiRefused`` (the API answered with its error body, ``{"error": {"code", "message",
"field"}}``).
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson

QueryValue = str | int | float | list[str] | None


class ApiUnreachable(Exception):
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


class ApiRefused(Exception):
    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True)
class Response:
    status: int
    data: Any
    headers: Mapping[str, str] = field(default_factory=dict)


def _query(params: Mapping[str, QueryValue]) -> str:
    pairs: list[tuple[str, str]] = []
    for name, value in params.items():
        if value is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            pairs.append((name, str(item)))
    return ("?" + urlencode(pairs)) if pairs else ""


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", exc)
    if isinstance(inner, socket.timeout | TimeoutError):
        return "no answer in time"
    if isinstance(inner, ConnectionRefusedError):
        return "connection refused"
    return str(getattr(inner, "strerror", None) or inner)


@dataclass(frozen=True)
class ApiClient:
    base_url: str
    key: str
    timeout_s: float = 10.0

    def request(self, method: str, path: str, *, query: Mapping[str, QueryValue] | None = None,
                body: Any = None) -> Response:
        url = self.base_url.rstrip("/") + path + _query(query or {})
        headers = {"Authorization": f"Bearer {self.key}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return Response(resp.status, _parse(resp.read()), dict(resp.headers))
        except urllib.error.HTTPError as exc:
            raise _refusal(exc.code, exc.read()) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ApiUnreachable(self.base_url, _reason(exc)) from None

    def get(self, path: str, **query: QueryValue) -> Any:
        return self.request("GET", path, query=query).data

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body={} if body is None else body).data

    def pages(self, path: str, query: Mapping[str, QueryValue], *,
              limit: int) -> tuple[list[Any], str | None]:
        """Up to ``limit`` items of a list route, following ``next_cursor``; returns them
        with the cursor of what is left (None when nothing is)."""
        items: list[Any] = []
        cursor = query.get("cursor")
        for page in self._pages(path, dict(query), limit):
            items += page["data"]
            cursor = page["next_cursor"]
        return items[:limit], cursor if isinstance(cursor, str) else None

    def _pages(self, path: str, query: dict[str, QueryValue], limit: int) -> Iterator[Any]:
        left = limit
        while left > 0:
            page = self.get(path, **{**query, "limit": min(left, 1000)})
            yield page
            left -= len(page["data"])
            if not page["next_cursor"] or not page["data"]:
                return
            query["cursor"] = page["next_cursor"]


def _parse(raw: bytes) -> Any:
    return orjson.loads(raw) if raw else None


def _refusal(status: int, raw: bytes) -> ApiRefused:
    try:
        error = orjson.loads(raw)["error"]
        return ApiRefused(status, str(error["code"]), str(error["message"]), error.get("field"))
    except (orjson.JSONDecodeError, KeyError, TypeError):
        text = raw.decode("utf-8", "replace").strip()[:200] or "no body"
        return ApiRefused(status, "http_error", text)
