"""Reconciliation: does what PostgreSQL says add up, end to end, over a time window?

``hookstream reconcile --since -2h --until -1h`` checks, for the outbox rows published
in the window (and the ones committed in it but never published):

* every committed outbox row was published (or quarantined with a reason);
* every published row was stored as an event by the fanout;
* every (event, subscribed endpoint) pair has a delivery row (UNIQUE (event_id,
  endpoint_id) makes "exactly one" the schema's job; the check is that one exists);
* every delivery is delivered, dead, failed, superseded, in flight under a live lease,
  or pending with a reason (scheduled or deferred to a due time not yet past, or held
  by a paused or disabled endpoint); a pending row of an active endpoint overdue by
  more than ``--stall-s`` is a gap (its task was lost; the sweeper re-queues it);
* attempt rows agree with their delivery (numbered 1..n, none left open, a delivered
  row has a 2xx attempt).

All queries (``sql/reconcile.sql``, run by ``reconcile_store``) run in one read-only
REPEATABLE READ transaction and follow indexes from the window on ``outbox.published_at``.
Exit status 1 when a gap is found, so it can run from cron and alert.

What the database cannot know is what a receiver saw; ``receiver_gaps`` is the check a
harness holding the receivers runs against ``attempt_counts``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from hookstream.core.times import parse_time
from hookstream.ops import reconcile_store as store

__all__ = ["Gap", "Report", "parse_time", "receiver_gaps", "reconcile"]

DEFAULT_GRACE_S = 300.0
# As long as the sweeper's default bound: past it, an overdue delivery is a gap.
DEFAULT_STALL_S = 120.0
DEFAULT_SAMPLE = 10
GAP_QUERIES = ("gaps_unpublished", "gaps_not_stored", "gaps_missing_delivery", "gaps_attempts")


@dataclass(frozen=True)
class Gap:
    kind: str
    total: int
    sample: list[str]
    details: list[str] = field(default_factory=list)


@dataclass
class Report:
    since: datetime
    until: datetime
    cutoff: datetime
    counts: dict[str, int]
    states: dict[str, int]
    gaps: list[Gap]
    grace_s: float = DEFAULT_GRACE_S

    @property
    def ok(self) -> bool:
        return not self.gaps

    @property
    def checked(self) -> bool:
        """Something was looked at: "no gaps" over nothing is no news."""
        return (bool(self.gaps) or any(self.states.values())
                or any(self.counts.get(k) for k in ("published", "quarantined")))

    @property
    def warnings(self) -> list[str]:
        out = []
        if self.cutoff <= self.since:
            out.append(
                f"the whole window is inside the grace period (rows younger than "
                f"--grace-s {self.grace_s:g} s are still moving and are not checked): nothing "
                f"was checked; give an --until at least {self.grace_s:g} s ago")
        elif self.cutoff < self.until:
            out.append(f"the window was cut at {self.cutoff.isoformat()} by the grace period "
                       f"(--grace-s {self.grace_s:g}): what came later is not checked")
        if self.cutoff > self.since and not self.checked:
            out.append("no outbox row was published or quarantined in the window: nothing "
                       "was checked (a quiet period, or the wrong window?)")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(), "until": self.until.isoformat(),
            "cutoff": self.cutoff.isoformat(), "counts": self.counts, "states": self.states,
            "gaps": [g.__dict__ for g in self.gaps], "ok": self.ok, "checked": self.checked,
            "warnings": self.warnings,
        }


def reconcile(conn: psycopg.Connection[Any], *, since: datetime, until: datetime,
              grace_s: float = DEFAULT_GRACE_S, stall_s: float = DEFAULT_STALL_S,
              sample: int = DEFAULT_SAMPLE) -> Report:
    """Run every check on ``conn`` (a connection of its own: the snapshot is opened here).

    ``grace_s``: what was published (or committed) less than this ago is still moving
    and not checked. ``stall_s``: how overdue a pending row must be, on an idle
    endpoint, to count as stalled; and how long an expired lease may wait for the reaper.
    """
    # One snapshot for every check: a row moving between two queries is not a gap.
    conn.rollback()
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
    try:
        db_now = store.db_now(conn)
        cutoff = min(until, db_now - timedelta(seconds=grace_s))
        params = {"since": since, "cutoff": cutoff, "stall_s": stall_s, "sample": sample}
        counts = store.window_counts(conn, params)
        gaps: dict[str, Gap] = {}
        for name in GAP_QUERIES:
            for row in store.gap_rows(conn, name, params):
                gap = gaps.setdefault(row["kind"], Gap(row["kind"], int(row["total"]), []))
                gap.sample.append(row["key"])
                gap.details.append(row["detail"])
        states: dict[str, int] = {}
        for row in store.delivery_states(conn, params):
            states[row["verdict"]] = int(row["n"])
            if row["verdict"].startswith("gap:"):
                kind = row["verdict"].removeprefix("gap:")
                gaps[kind] = Gap(kind, int(row["n"]), list(row["sample"] or []))
    finally:
        conn.rollback()
    return Report(since, until, cutoff, {k: int(v) for k, v in counts.items()}, states,
                  sorted(gaps.values(), key=lambda g: g.kind), grace_s)


def explain(conn: psycopg.Connection[Any], *, since: datetime, until: datetime,
            analyze: bool = False, stall_s: float = DEFAULT_STALL_S) -> dict[str, str]:
    """EXPLAIN of every reconciliation query, to check it follows the indexes."""
    params = {"since": since, "cutoff": until, "stall_s": stall_s, "sample": DEFAULT_SAMPLE}
    plans: dict[str, str] = {}
    for name in ("window_counts", *GAP_QUERIES, "delivery_states"):
        plans[name] = store.plan(conn, name, params, analyze=analyze)
    conn.rollback()
    return plans


# -- the harness-side check ------------------------------------------------------------

def attempt_counts(conn: psycopg.Connection[Any], delivery_ids: Iterable[str]) -> dict[str, int]:
    return {r[0]: int(r[1]) for r in store.attempt_counts(conn, delivery_ids)}


def receiver_gaps(received: Mapping[str, int], attempts: Mapping[str, int],
                  delivered: Iterable[str] = (), sample: int = DEFAULT_SAMPLE) -> list[Gap]:
    """What receivers saw against attempt rows (pure).

    ``received``: requests per webhook-id (= delivery id) counted at the receivers;
    ``attempts``: attempt rows per delivery id; ``delivered``: ids the database says
    were delivered to these receivers. A duplicate is explained when the delivery has at
    least as many attempt rows as requests arrived (an attempt row is written before its
    POST, so even a dispatcher killed mid-request leaves one).
    """
    unknown = sorted(k for k in received if k not in attempts)
    unexplained = sorted(k for k, n in received.items() if k in attempts and n > attempts[k])
    never_seen = sorted(k for k in delivered if received.get(k, 0) == 0)
    out = []
    for kind, keys in (("receiver_unknown_webhook_id", unknown),
                       ("receiver_duplicate_unexplained", unexplained),
                       ("delivered_never_received", never_seen)):
        if keys:
            details = [f"received {received.get(k, 0)}, attempt rows {attempts.get(k, 0)}"
                       for k in keys[:sample]]
            out.append(Gap(kind, len(keys), keys[:sample], details))
    return out


# -- command line ----------------------------------------------------------------------

def format_report(report: Report) -> str:
    end = max(report.cutoff, report.since)
    c = report.counts
    lines = [f"checked: outbox rows published {report.since.isoformat(timespec='seconds')} .. "
             f"{end.isoformat(timespec='seconds')}"
             + (" (until cut by the grace period)" if report.cutoff < report.until else ""),
             f"  {c.get('published', 0):,} published, {c.get('quarantined', 0):,} quarantined;"
             f" their {c.get('deliveries', 0):,} deliveries and {c.get('attempts', 0):,} "
             "attempts"]
    if report.states:
        lines.append("deliveries by state:")
        lines += [f"  {k:<36} {v:>12,}" for k, v in report.states.items()]
    if report.ok:
        lines.append("no gaps: every event, delivery and attempt is accounted for"
                     if report.checked else "nothing to check in this window (see the warning)")
    for g in report.gaps:
        lines.append(f"GAP {g.kind}: {g.total:,}")
        for i, key in enumerate(g.sample):
            detail = g.details[i] if i < len(g.details) else ""
            lines.append(f"    {key}  {detail}".rstrip())
    return "\n".join(lines)

