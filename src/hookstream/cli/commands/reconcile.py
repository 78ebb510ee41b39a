"""``hookstream reconcile``: does what PostgreSQL says add up over a window (outbox ↔
events ↔ deliveries ↔ attempts)? The checks are ``hookstream.ops.reconcile``'s; this is
the command line around them (exit 1 on a gap, so it can run from cron and alert)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg

from hookstream.cli.failures import USAGE, CommandError
from hookstream.core.settings import CommonSettings, from_env
from hookstream.core.times import parse_time
from hookstream.io.pg import translating
from hookstream.ops.reconcile import (
    DEFAULT_GRACE_S,
    DEFAULT_SAMPLE,
    DEFAULT_STALL_S,
    explain,
    format_report,
    reconcile,
)


def register(sub: Any) -> None:
    """Add ``reconcile`` to the ``hookstream`` command line."""
    p = sub.add_parser("reconcile", help="check outbox ↔ events ↔ deliveries ↔ attempts "
                                         "over a window (exit 1 on a gap)")
    p.add_argument("--since", default="now-2h",
                   help="ISO time or relative (now-90m, now-2h, now-1d); default now-2h")
    p.add_argument("--until", default="now-1h",
                   help="ISO time, relative or 'now'; default now-1h")
    p.add_argument("--grace-s", type=float, default=DEFAULT_GRACE_S,
                   help="skip what is younger than this (still moving)")
    p.add_argument("--stall-s", type=float, default=DEFAULT_STALL_S,
                   help="a pending row this overdue on an idle endpoint is a gap")
    p.add_argument("--sample", type=int, default=DEFAULT_SAMPLE)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--explain", action="store_true",
                   help="print the query plans (EXPLAIN ANALYZE) instead of checking")
    p.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    settings = from_env(CommonSettings)
    now = datetime.now(UTC)
    try:
        since, until = parse_time(args.since, now), parse_time(args.until, now)
    except ValueError as exc:
        raise CommandError(f"bad --since/--until: {exc}", USAGE) from None
    if until <= since:
        raise CommandError(f"--until ({args.until}) must be after --since ({args.since})", USAGE)
    with translating(), psycopg.connect(settings.database_url, connect_timeout=5) as conn:
        if args.explain:
            for name, plan in explain(conn, since=since, until=until, analyze=True,
                                      stall_s=args.stall_s).items():
                print(f"-- {name}\n{plan}\n")
            return 0
        report = reconcile(conn, since=since, until=until, grace_s=args.grace_s,
                           stall_s=args.stall_s, sample=args.sample)
    if args.json:
        print(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        print(format_report(report))
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    return 0 if report.ok else 1
