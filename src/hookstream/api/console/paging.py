"""Keyset pages for the console's lists. Pure.

A page asks for one row more than it shows: that row's existence is the "next" link,
so no page ever counts the table. The cursor is the API's own (``validation.
encode_cursor``: the position of the last row shown), so the console and the JSON API
page the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

from hookstream.controlplane.validation import encode_cursor

T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def page_of(rows: Sequence[T], limit: int, key: Callable[[T], tuple[datetime, Any]]) -> Page[T]:
    """``rows`` as fetched with ``LIMIT limit + 1``."""
    more = len(rows) > limit
    items = list(rows[:limit])
    return Page(items, encode_cursor(*key(items[-1])) if more else None)


def link(path: str, params: Mapping[str, Any], **changes: Any) -> str:
    """``path`` with the list's filters (``params``) and ``changes`` as its query string;
    empty values are left out, lists repeat their name (``status=a&status=b``)."""
    merged = {**params, **changes}
    pairs: list[tuple[str, str]] = []
    for name, value in merged.items():
        values = value if isinstance(value, list | tuple) else [value]
        pairs += [(name, str(v)) for v in values if v not in (None, "")]
    return f"{path}?{urlencode(pairs)}" if pairs else path
