"""``hookstream deliveries list | show | replay`` and ``hookstream events list | show``."""

from __future__ import annotations

import argparse
from typing import Any

from hookstream.cli import output
from hookstream.cli.commands import base

DELIVERY_STATUSES = ("pending", "in_flight", "delivered", "failed", "dead", "superseded")

DELIVERY_COLUMNS: list[output.Column] = [
    ("id", output.field("id")), ("status", output.field("status")),
    ("event type", output.field("event_type")), ("endpoint", output.field("endpoint_id")),
    ("attempts", output.field("attempts")), ("created", output.field("created_at")),
    ("last error", output.field("last_error"))]
DELIVERY_FIELDS: list[output.Column] = [
    ("id (webhook-id)", output.field("id")), ("status", output.field("status")),
    ("tenant", output.field("tenant")), ("endpoint", output.field("endpoint_id")),
    ("event", output.field("event_id")), ("event type", output.field("event_type")),
    ("attempts", output.field("attempts")), ("next attempt", output.field("next_attempt_at")),
    ("expires", output.field("expires_at")), ("last error", output.field("last_error")),
    ("created", output.field("created_at")), ("delivered", output.field("delivered_at"))]
ATTEMPT_COLUMNS: list[output.Column] = [
    ("#", output.field("attempt_no")), ("started", output.field("started_at")),
    ("status", output.field("status_code")), ("ms", output.field("latency_ms")),
    ("outcome", output.field("outcome")), ("error", output.field("error_class")),
    ("manual", output.field("manual")), ("response", output.field("response_excerpt"))]
EVENT_COLUMNS: list[output.Column] = [
    ("id", output.field("id")), ("type", output.field("type")),
    ("tenant", output.field("tenant")), ("object", output.field("object_id")),
    ("version", output.field("object_version")), ("occurred", output.field("occurred_at"))]
EVENT_FIELDS: list[output.Column] = [
    *EVENT_COLUMNS, ("schema version", output.field("schema_version")),
    ("committed", output.field("committed_at")),
    ("payload", lambda e: e["payload"] if e["payload"] is not None
     else f"(not JSON; base64) {e['payload_base64']}")]


def cmd_deliveries_list(args: argparse.Namespace) -> int:
    items, cursor = base.client().pages("/v1/deliveries", {
        "endpoint_id": args.endpoint, "tenant": args.tenant, "status": args.status,
        "since": args.since, "until": args.until, "cursor": args.cursor}, limit=args.limit)
    return base.print_list(args, items, cursor, DELIVERY_COLUMNS, "deliveries")


def cmd_deliveries_show(args: argparse.Namespace) -> int:
    delivery = base.client().get(f"/v1/deliveries/{args.delivery_id}")
    if args.json:
        output.as_json(delivery)
        return 0
    print(output.block(delivery, DELIVERY_FIELDS))
    print()
    output.listing(delivery["attempt_log"], ATTEMPT_COLUMNS, noun="attempts yet")
    return 0


def cmd_deliveries_replay(args: argparse.Namespace) -> int:
    response = base.client().request("POST", f"/v1/deliveries/{args.delivery_id}/replay",
                                     body={})
    delivery = response.data
    if args.json:
        output.as_json(delivery)
        return 0
    who = response.headers.get("Hookstream-Task", "")
    print(f"delivery {delivery['id']} queued for one more attempt ("
          + ("Kafka acknowledged the task" if who == "acknowledged" else
             "Kafka did not acknowledge the task in time: the dispatcher's sweeper sends it")
          + f"); follow it: hookstream deliveries show {delivery['id']}")
    return 0


def cmd_events_list(args: argparse.Namespace) -> int:
    items, cursor = base.client().pages("/v1/events", {
        "endpoint_id": args.endpoint, "tenant": args.tenant, "type": args.types,
        "since": args.since, "until": args.until, "cursor": args.cursor}, limit=args.limit)
    return base.print_list(args, items, cursor, EVENT_COLUMNS, "events")


def cmd_events_show(args: argparse.Namespace) -> int:
    return base.print_one(args, base.client().get(f"/v1/events/{args.event_id}"), EVENT_FIELDS)


def _window(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--since", type=base.time_arg,
                   help=f"{what} from this time (ISO 8601 or now-2h)")
    p.add_argument("--until", type=base.time_arg, help=f"{what} before this time")


def register(sub: Any) -> None:
    dl = sub.add_parser(
        "deliveries", help="deliveries (one per event and endpoint): list, show, replay",
        description="Deliveries through the API. `show` includes every attempt; `replay` "
                    "makes one more attempt of the same delivery (same webhook-id, same bytes)."
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = base.list_flags(dl.add_parser("list", help="newest first"))
    p.add_argument("--endpoint", type=base.uuid_arg, metavar="ENDPOINT_ID")
    p.add_argument("--tenant", help="an operator key: this tenant's deliveries")
    p.add_argument("--status", action="append", choices=DELIVERY_STATUSES,
                   help="only this state (repeatable)")
    _window(p, "created")
    p.set_defaults(fn=cmd_deliveries_list)
    p = base.json_flag(dl.add_parser("show", help="one delivery with its attempts"))
    p.add_argument("delivery_id", type=base.uuid_arg, metavar="DELIVERY_ID")
    p.set_defaults(fn=cmd_deliveries_show)
    p = base.json_flag(dl.add_parser("replay", help="one more attempt (a failed, dead or "
                                                    "delivered delivery)"))
    p.add_argument("delivery_id", type=base.uuid_arg, metavar="DELIVERY_ID")
    p.set_defaults(fn=cmd_deliveries_replay)

    ev = sub.add_parser(
        "events", help="events as published, for reconciliation: list, show",
        description="The immutable events (history window: HOOKSTREAM_HISTORY_DAYS), oldest "
                    "first. With --endpoint: the events that endpoint subscribes to, including "
                    "those it missed while disabled."
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = base.list_flags(ev.add_parser("list", help="oldest first"))
    p.add_argument("--endpoint", type=base.uuid_arg, metavar="ENDPOINT_ID",
                   help="events matching this endpoint's types")
    p.add_argument("--tenant", help="an operator key without --endpoint: whose events")
    p.add_argument("--type", dest="types", action="append", metavar="TYPE",
                   help="'invoice.paid', 'invoice.*' (repeatable)")
    _window(p, "occurred")
    p.set_defaults(fn=cmd_events_list)
    p = base.json_flag(ev.add_parser("show", help="one event with its payload"))
    p.add_argument("event_id", type=base.uuid_arg, metavar="EVENT_ID")
    p.set_defaults(fn=cmd_events_show)
