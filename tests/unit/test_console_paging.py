"""Keyset pages: walking the "next" links shows every row once, in order, and no page
needs a count."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from hypothesis import given
from hypothesis import strategies as st

from hookstream.api.console.paging import link, page_of
from hookstream.controlplane.validation import decode_cursor

BASE = datetime(2026, 1, 1, tzinfo=UTC)
rows_strategy = st.lists(st.tuples(st.integers(0, 50), st.uuids()), max_size=60, unique=True)


@given(raw=rows_strategy, limit=st.integers(1, 12))
def test_walking_the_pages_gives_every_row_once_newest_first(
        raw: list[tuple[int, uuid.UUID]], limit: int) -> None:
    table = sorted(((BASE + timedelta(seconds=s), i) for s, i in raw), reverse=True)
    shown: list[tuple[datetime, uuid.UUID]] = []
    before: tuple[datetime, uuid.UUID] | None = None
    for _ in range(len(table) + 2):
        # what list_deliveries does: rows strictly before the cursor, LIMIT limit + 1
        fetched = [r for r in table if before is None or r < before][:limit + 1]
        found = page_of(fetched, limit, lambda r: r)
        shown += found.items
        if found.next_cursor is None:
            break
        before = decode_cursor(found.next_cursor)
    assert shown == table


def test_link_keeps_the_filters_and_drops_empty_ones() -> None:
    url = link("/console/deliveries", {"endpoint_id": "e1", "status": ["failed", "dead"],
                                       "since": "", "tenant": None}, cursor="abc")
    parts = urlsplit(url)
    assert parts.path == "/console/deliveries"
    assert parse_qs(parts.query) == {"endpoint_id": ["e1"], "status": ["failed", "dead"],
                                     "cursor": ["abc"]}
    assert link("/console/x", {"a": ""}) == "/console/x"


def test_link_escapes_what_it_is_given() -> None:
    url = link("/console/events", {"type": 'a&b="c"<'})
    assert "&b=" not in url and "<" not in url and '"' not in url
