"""``hookstream operations show | wait``: the bulk replays and recoveries the API works
through in the background (``202`` + ``/v1/operations/{id}``), and waiting for one with
a progress bar."""

from __future__ import annotations

import argparse
import time
from typing import Any

from hookstream.cli import output
from hookstream.cli.client import ApiClient
from hookstream.cli.commands import base
from hookstream.cli.failures import REFUSED, UNREACHABLE, CommandError
from hookstream.cli.progress import Progress

POLL_INTERVAL_S = 0.5
COLUMNS: list[output.Column] = [
    ("id", output.field("id")), ("kind", output.field("kind")),
    ("status", output.field("status")), ("tenant", output.field("tenant")),
    ("endpoint", output.field("endpoint_id")),
    ("progress", lambda op: "{processed}/{total} processed, {enqueued} queued".format(
        **op["progress"])),
    ("since", output.field("params.since")), ("until", output.field("params.until")),
    ("statuses", output.field("params.statuses")),
    ("error", output.field("error")), ("created", output.field("created_at")),
    ("finished", output.field("finished_at"))]


def _label(op: dict[str, Any]) -> str:
    return f"{op['kind']} {op['status']}"


def wait(api: ApiClient, operation_id: str, *, timeout_s: float,
         progress: Progress | None = None) -> dict[str, Any]:
    """Poll until the operation is no longer running (or ``timeout_s`` passes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        op: dict[str, Any] = api.get(f"/v1/operations/{operation_id}")
        done, total = op["progress"]["processed"], op["progress"]["total"]
        if op["status"] != "running":
            if progress is not None:
                progress.finish(_label(op), done, total)
            return op
        if progress is not None:
            progress.update(_label(op), done, total)
        if time.monotonic() >= deadline:
            raise CommandError(
                f"operation {operation_id} still running after {timeout_s:g} s "
                f"({done}/{total} processed); it goes on in the API: `hookstream operations "
                f"wait {operation_id}`", UNREACHABLE)
        time.sleep(POLL_INTERVAL_S)


def _finished(args: argparse.Namespace, op: dict[str, Any]) -> int:
    base.print_one(args, op, COLUMNS)
    if op["status"] == "failed":
        raise CommandError(f"operation {op['id']} failed: {op['error']}", REFUSED)
    return 0


def start_operation(args: argparse.Namespace, path: str, body: dict[str, Any]) -> int:
    """POST a route that answers 202 with an operation; print it, or wait for it."""
    api = base.client()
    op = api.post(path, body)
    if not args.wait:
        base.print_one(args, op, COLUMNS)
        if not args.json:
            print(f"(follow it: hookstream operations wait {op['id']})")
        return 0
    return _finished(args, wait(api, op["id"], timeout_s=args.timeout_s,
                                progress=None if args.json else Progress()))


def cmd_show(args: argparse.Namespace) -> int:
    return base.print_one(args, base.client().get(f"/v1/operations/{args.operation_id}"),
                          COLUMNS)


def cmd_wait(args: argparse.Namespace) -> int:
    op = wait(base.client(), args.operation_id, timeout_s=args.timeout_s,
              progress=None if args.quiet else Progress())
    return _finished(args, op)


def register(sub: Any) -> None:
    ops = sub.add_parser(
        "operations", help="bulk replays and recoveries: show one, wait for one",
        description="Bulk replays and recoveries run in the API's background, in batches; "
                    "these commands show one and wait for it to finish."
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = base.json_flag(ops.add_parser("show", help="status and progress"))
    p.add_argument("operation_id", type=base.uuid_arg, metavar="OPERATION_ID")
    p.set_defaults(fn=cmd_show)
    p = base.json_flag(ops.add_parser(
        "wait", help="wait until it finishes, with a progress bar (exit 1 if it failed)"))
    p.add_argument("operation_id", type=base.uuid_arg, metavar="OPERATION_ID")
    p.add_argument("--timeout-s", type=float, default=600.0,
                   help="give up waiting after this long (exit 3; default 600)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=cmd_wait)
