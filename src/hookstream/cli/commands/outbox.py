"""``hookstream outbox quarantined | show | requeue`` and ``hookstream dead-letters list``:
what the pipeline set aside, and why."""

from __future__ import annotations

import argparse
from typing import Any

from hookstream.cli import output
from hookstream.cli.commands import base

OUTBOX_COLUMNS: list[output.Column] = [
    ("event id", output.field("event_id")), ("tenant", output.field("tenant")),
    ("type", output.field("type")), ("bytes", output.field("payload_bytes")),
    ("quarantined", output.field("quarantined_at")), ("reason", output.field("reason"))]
OUTBOX_FIELDS: list[output.Column] = [
    ("event id", output.field("event_id")), ("state", output.field("state")),
    ("tenant", output.field("tenant")), ("type", output.field("type")),
    ("schema version", output.field("schema_version")),
    ("object", output.field("object_id")), ("object version", output.field("object_version")),
    ("committed", output.field("created_at")), ("published", output.field("published_at")),
    ("quarantined", output.field("quarantined_at")), ("reason", output.field("reason")),
    ("payload bytes", output.field("payload_bytes"))]
DEAD_COLUMNS: list[output.Column] = [
    ("time", output.field("timestamp")), ("kind", output.field("kind")),
    ("delivery / event", lambda d: (d["delivery"] or {}).get("delivery_id")
     or (d["event"] or {}).get("event_id")),
    ("tenant", lambda d: (d["delivery"] or d["event"] or {}).get("tenant")),
    ("reason", output.field("reason")),
    ("at", lambda d: f"{d['partition']}/{d['offset']}")]


def cmd_quarantined(args: argparse.Namespace) -> int:
    items, cursor = base.client().pages("/v1/outbox/quarantined", {
        "tenant": args.tenant, "cursor": args.cursor}, limit=args.limit)
    return base.print_list(args, items, cursor, OUTBOX_COLUMNS, "quarantined outbox rows")


def cmd_show(args: argparse.Namespace) -> int:
    return base.print_one(args, base.client().get(f"/v1/outbox/{args.event_id}"),
                          OUTBOX_FIELDS)


def cmd_requeue(args: argparse.Namespace) -> int:
    row = base.client().post(f"/v1/outbox/{args.event_id}/requeue")
    if args.json:
        output.as_json(row)
    else:
        print(f"outbox row {row['event_id']} is back in line: the relay checks it again and "
              "publishes it, or quarantines it again with the reason; see `hookstream "
              f"outbox show {row['event_id']}`")
    return 0


def cmd_dead_letters(args: argparse.Namespace) -> int:
    items, cursor = base.client().pages("/v1/dead-letters", {
        "since": args.since, "cursor": args.cursor}, limit=args.limit)
    return base.print_list(args, items, cursor, DEAD_COLUMNS, "dead letters")


def register(sub: Any) -> None:
    ob = sub.add_parser(
        "outbox", help="outbox rows the relay quarantined: list, show, re-queue",
        description="The relay quarantines a row it must not publish (unknown schema "
                    "version, bad event type, not JSON, too large, refused by the broker) "
                    "with a reason, and goes on with the rows behind it. Fix the cause (a "
                    "relay setting, a deployed schema version, the row itself in SQL), then "
                    "re-queue the row: the relay checks it again."
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = base.list_flags(ob.add_parser("quarantined", help="quarantined rows, newest first"))
    p.add_argument("--tenant", help="an operator key: only this tenant's")
    p.set_defaults(fn=cmd_quarantined)
    for name, help_text, fn in (
            ("show", "one outbox row: pending, published or quarantined (and why)", cmd_show),
            ("requeue", "put a quarantined row back in line, after fixing its cause",
             cmd_requeue)):
        p = base.json_flag(ob.add_parser(name, help=help_text))
        p.add_argument("event_id", type=base.uuid_arg, metavar="EVENT_ID")
        p.set_defaults(fn=fn)

    dl = sub.add_parser(
        "dead-letters", help="the dead-letter topic, decoded (operator key)",
        description="Records on the <prefix>.dead topic, oldest first: deliveries that became "
                    "dead (replay them with `hookstream deliveries replay`), and records "
                    "the fanout or the dispatcher could not decode or store."
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = base.list_flags(dl.add_parser("list", help="oldest first"))
    p.add_argument("--since", type=base.time_arg, help="from this time (ISO 8601 or now-1d)")
    p.set_defaults(fn=cmd_dead_letters)
