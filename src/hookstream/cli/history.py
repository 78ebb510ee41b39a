"""``hookstream history``: the partitioned history's maintenance (hookstream.ops.retention).

``maintain`` makes the day partitions ahead and drops the days past
HOOKSTREAM_HISTORY_DAYS, as the relay does every HOOKSTREAM_HISTORY_MAINTAIN_INTERVAL_S;
``--dry-run`` only says what would go. ``days`` lists the day partitions and their sizes.
Both are safe while the services run."""

from __future__ import annotations

import argparse
from typing import Any

import psycopg

from hookstream.core.settings import RelaySettings, from_env


def cmd_maintain(args: argparse.Namespace) -> int:
    from hookstream.ops.retention import maintain
    from hookstream.policy.retention import plan

    settings = from_env(RelaySettings)
    with psycopg.connect(settings.database_url, autocommit=True, connect_timeout=10) as conn:
        if args.dry_run:
            from datetime import UTC, datetime

            from hookstream.ops.retention import existing_days

            p = plan(existing_days(conn), datetime.now(UTC).date(), settings.history_days,
                     settings.history_days_ahead)
        run = maintain(conn, history_days=settings.history_days,
                       days_ahead=settings.history_days_ahead, dry_run=args.dry_run)
    if not run.ran:
        print("another maintenance run holds the lock; nothing done")
        return 1
    if args.dry_run:
        print(f"would drop {len(p.expired) - len(run.held)} day(s): "
              + (", ".join(d.isoformat() for d in p.expired if d not in run.held) or "none"))
    else:
        print(f"partitions made: {run.created}; days dropped: "
              + (", ".join(f"{d} ({s * 1000:.0f} ms)" for d, s in zip(
                  run.dropped, run.drop_s, strict=True)) or "none"))
    for day, live in sorted(run.held.items()):
        print(f"held: {day} still has {live} pending or in-flight deliveries (kept until they"
              " finish; docs/runbook.md)")
    if run.strays:
        print(f"rows in no day partition: {run.strays} (the next run gives them their day)")
    if run.lock_waits:
        print(f"{run.lock_waits} step(s) gave up waiting for a lock; run again later")
    return 0


def cmd_days(_: argparse.Namespace) -> int:
    from hookstream.ops.retention_store import day_sizes

    settings = from_env(RelaySettings)
    with psycopg.connect(settings.database_url, autocommit=True, connect_timeout=10) as conn:
        rows = day_sizes(conn)
    print(f"{'day':<10} {'size':>10} {'deliveries (estimate)':>22}")
    for day, size, deliveries in rows:
        estimate = "-" if deliveries is None or deliveries < 0 else f"{int(deliveries):,}"
        print(f"{day or 'default':<10} {_size(int(size)):>10} {estimate:>22}")
    print(f"history kept: {settings.history_days} days (HOOKSTREAM_HISTORY_DAYS)")
    return 0


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n //= 1024
    return f"{n} TB"


def register(sub: Any) -> None:
    history = sub.add_parser(
        "history", help="day partitions of events, deliveries and attempts; retention",
        description=__doc__).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = history.add_parser(
        "maintain", help="make the days ahead, drop the days past HOOKSTREAM_HISTORY_DAYS")
    p.add_argument("--dry-run", action="store_true", help="only say what would be dropped")
    p.set_defaults(fn=cmd_maintain)
    p = history.add_parser("days", help="list the day partitions and their sizes")
    p.set_defaults(fn=cmd_days)
