"""Which day partitions of the history (events, deliveries, attempts: migration 0014)
to create and which have expired. Pure: the days present and today are arguments; the
I/O is hookstream.ops.retention.

A day partition D holds the rows whose event was committed in [D, D + 1) UTC. A row is
kept at least ``history_days`` after its commit, so D expires once D + 1 + history_days
<= today: its newest row is then older than the history, whatever the hour. Partitions
are made from yesterday (a late run still gets yesterday's stragglers a partition of
their own) to ``days_ahead`` days after today, so a maintenance job that stops for up
to that long leaves no row without its day.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta

# A delivery is retried for at most 24 h after its commit (HOOKSTREAM_RETRY_WINDOW_S's
# default); a shorter history would drop days whose deliveries are still being retried.
MIN_HISTORY_DAYS = 2


@dataclass(frozen=True, slots=True)
class HistoryPlan:
    create_from: date  # days [create_from, create_to) must exist
    create_to: date
    expired: tuple[date, ...]  # existing days past the history, oldest first


def plan(existing: Iterable[date], today: date, history_days: int,
         days_ahead: int) -> HistoryPlan:
    if history_days < MIN_HISTORY_DAYS:
        raise ValueError(f"history_days must be at least {MIN_HISTORY_DAYS}, not {history_days}")
    if days_ahead < 1:
        raise ValueError(f"days_ahead must be at least 1, not {days_ahead}")
    keep_from = today - timedelta(days=history_days)  # the oldest day not expired
    expired = tuple(sorted(d for d in set(existing) if d < keep_from))
    return HistoryPlan(create_from=max(today - timedelta(days=1), keep_from),
                       create_to=today + timedelta(days=days_ahead + 1), expired=expired)


def day_expired(day: date, today: date, history_days: int) -> bool:
    """Every row of ``day`` is older than ``history_days`` on any instant of ``today``."""
    return day + timedelta(days=1 + history_days) <= today
