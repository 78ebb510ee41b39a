"""Cutting a batch's fan-out into statements of bounded size, and the task encoder."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hookstream.fanout.plan import Audience, Slice, plan, ranges
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.fastcodec import encode_new_task


def _ids(n: int) -> list[uuid.UUID]:
    return sorted(uuid.UUID(int=i + 1) for i in range(n))


def _audience(n: int, page: int) -> Audience:
    ids = _ids(n)
    return Audience(n, tuple(ids[i - 1] for i in range(page, n + 1, page)))


def _covered(n: int, page: int) -> list[uuid.UUID]:
    ids = _ids(n)
    out: list[uuid.UUID] = []
    for after, upto, rows in ranges(_audience(n, page), page):
        chosen = [i for i in ids if (after is None or i > after) and (upto is None or i <= upto)]
        assert len(chosen) == rows <= page
        out.extend(chosen)
    return out


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 600), page=st.integers(1, 200))
def test_ranges_cover_every_endpoint_once_in_pages_of_at_most_page(n: int, page: int) -> None:
    assert _covered(n, page) == _ids(n)


def test_ten_thousand_endpoints_make_pages_of_the_limit() -> None:
    assert [r[2] for r in ranges(_audience(10_000, 1000), 1000)] == [1000] * 10
    assert [r[2] for r in ranges(_audience(10_001, 1000), 1000)] == [1000] * 10 + [1]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 2500), max_size=40), max_rows=st.integers(1, 1000))
def test_statements_stay_within_the_limit_and_keep_event_order(sizes: list[int],
                                                              max_rows: int) -> None:
    keys = [(f"t{i}", "x") for i in range(len(sizes))]
    audiences = {k: _audience(n, max_rows) for k, n in zip(keys, sizes, strict=True) if n}
    statements = plan(keys, audiences, max_rows)
    flat: list[Slice] = [s for st_ in statements for s in st_]
    assert all(sum(s.rows for s in st_) <= max_rows for st_ in statements)
    assert all(st_ for st_ in statements)
    assert [s.event for s in flat] == sorted(s.event for s in flat)
    # every row of every event planned exactly once; events reaching nobody skipped
    per_event = {i: sum(s.rows for s in flat if s.event == i) for i in range(len(sizes))}
    assert per_event == dict(enumerate(sizes))


def test_small_events_share_one_statement() -> None:
    keys = [("acme", "a")] * 500
    statements = plan(keys, {("acme", "a"): Audience(4)}, 5000)
    assert len(statements) == 1 and len(statements[0]) == 500


@given(ids=st.lists(st.uuids(), min_size=3, max_size=3), tenant=st.text(max_size=40),
       lease=st.integers(0, 2**31 - 1),
       due=st.datetimes(min_value=datetime(1971, 1, 1), timezones=st.just(UTC)),
       committed=st.datetimes(min_value=datetime(1971, 1, 1), timezones=st.just(UTC)))
def test_task_encoder_writes_the_codecs_bytes(ids: list[uuid.UUID], tenant: str, lease: int,
                                              due: datetime, committed: datetime) -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    us = timedelta(microseconds=1)
    reference = DeliveryTask(ids[0], ids[1], ids[2], tenant, TaskKind.NEW, due, committed,
                             lease).encode()
    fast = encode_new_task(str(ids[0]), str(ids[1]), str(ids[2]), tenant, (due - epoch) // us,
                           (committed - epoch) // us, lease)
    assert fast == reference
