"""``hookstream endpoints ...``: every endpoint route of the API, one command each."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson

from hookstream.cli import output
from hookstream.cli.commands import base
from hookstream.cli.commands.operations import start_operation
from hookstream.cli.failures import USAGE, CommandError
from hookstream.endpoints import STATUSES

REPLAYABLE = ("delivered", "failed", "dead", "superseded")

LIST_COLUMNS: list[output.Column] = [
    ("id", output.field("id")), ("tenant", output.field("tenant")),
    ("status", output.field("status")), ("url", output.field("url")),
    ("types", output.field("event_types")), ("rate/s", output.field("rate_per_s")),
    ("failures", output.field("consecutive_failures"))]
SHOW_COLUMNS: list[output.Column] = [
    ("id", output.field("id")), ("tenant", output.field("tenant")),
    ("url", output.field("url")), ("description", output.field("description")),
    ("status", output.field("status")), ("event types", output.field("event_types")),
    ("rate per s", output.field("rate_per_s")), ("burst", output.field("burst")),
    ("max in flight", output.field("max_in_flight")), ("coalesce", output.field("coalesce")),
    ("config version", output.field("config_version")),
    ("consecutive failures", output.field("consecutive_failures")),
    ("failing since", output.field("first_failure_at")),
    ("paused until", output.field("paused_until")),
    ("disabled reason", output.field("disabled_reason")),
    ("created", output.field("created_at")), ("updated", output.field("updated_at"))]
HEALTH_COLUMNS: list[output.Column] = [
    ("endpoint", output.field("endpoint_id")), ("status", output.field("status")),
    ("circuit", output.field("circuit.state")),
    ("consecutive failures", output.field("circuit.consecutive_failures")),
    ("pending", output.field("pending")),
    ("oldest pending (s)", output.field("oldest_pending_age_s")),
    ("in flight", output.field("in_flight")), ("dead", output.field("dead")),
    ("attempts (window)", output.field("recent.attempts")),
    ("success rate", output.field("recent.success_rate")),
    ("last error", lambda h: None if h["last_error"] is None else
     f"{h['last_error']['at']} {h['last_error']['message']}")]
SECRET_COLUMNS: list[output.Column] = [
    ("version", output.field("version")), ("active", output.field("active")),
    ("created", output.field("created_at")), ("expires", output.field("expires_at"))]


def _path(args: argparse.Namespace, suffix: str = "") -> str:
    return f"/v1/endpoints/{args.endpoint_id}{suffix}"


def _show_endpoint(args: argparse.Namespace, endpoint: dict[str, Any]) -> int:
    return base.print_one(args, endpoint, SHOW_COLUMNS)


def _print_secret(args: argparse.Namespace, data: dict[str, Any], what: str) -> int:
    if args.json:
        output.as_json(data)
    else:
        print(what)
        print(f"secret:  {data['secret']}\n         (shown once: give it to the receiver now)")
    return 0


def _settings_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name in ("url", "description", "rate_per_s", "burst", "max_in_flight"):
        if getattr(args, name, None) is not None:
            body[name] = getattr(args, name)
    if getattr(args, "types", None):
        body["event_types"] = args.types
    if getattr(args, "coalesce", None) is not None:
        body["coalesce"] = args.coalesce
    return body


def cmd_create(args: argparse.Namespace) -> int:
    body = _settings_body(args)
    if args.tenant:
        body["tenant"] = args.tenant
    made = base.client().post("/v1/endpoints", body)
    return _print_secret(args, made, f"endpoint {made['id']} created for tenant "
                                     f"{made['tenant']}: {made['url']}")


def cmd_import(args: argparse.Namespace) -> int:
    try:
        data = orjson.loads(Path(args.file).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise CommandError(f"cannot read {args.file}: {exc}", USAGE) from None
    items = data.get("endpoints") if isinstance(data, dict) else data
    result = base.client().request("POST", "/v1/endpoints/import",
                                   body={"endpoints": items}).data
    if args.json:
        output.as_json(result)
    else:
        rows = [{"index": r["index"], "status": r["status"],
                 "id": r.get("endpoint", {}).get("id"),
                 "secret": r.get("secret"), "error": r.get("error", {}).get("message")}
                for r in result["results"]]
        print(output.table(rows, [("#", output.field("index")),
                                  ("status", output.field("status")),
                                  ("endpoint", output.field("id")),
                                  ("secret (shown once)", output.field("secret")),
                                  ("error", output.field("error"))]))
    failed = sum(1 for r in result["results"] if r["status"] >= 300)
    return 1 if failed else 0


def cmd_list(args: argparse.Namespace) -> int:
    items, cursor = base.client().pages("/v1/endpoints", {
        "tenant": args.tenant, "status": args.status, "cursor": args.cursor}, limit=args.limit)
    return base.print_list(args, items, cursor, LIST_COLUMNS, "endpoints")


def cmd_show(args: argparse.Namespace) -> int:
    return _show_endpoint(args, base.client().get(_path(args)))


def cmd_update(args: argparse.Namespace) -> int:
    body = _settings_body(args)
    if not body:
        raise CommandError("nothing to change: give at least one of --url, --types, "
                           "--description, --rate-per-s, --burst, --max-in-flight, "
                           "--coalesce/--no-coalesce", USAGE)
    return _show_endpoint(args, base.client().request("PATCH", _path(args), body=body).data)


def cmd_delete(args: argparse.Namespace) -> int:
    # 202: the endpoint is gone at once, its history is removed by an operation
    op = base.client().request("DELETE", _path(args)).data
    if args.json:
        output.as_json(op)
    else:
        print(f"endpoint {args.endpoint_id} deleted; its deliveries are removed in the "
              f"background (follow it: hookstream operations wait {op['id']})")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    body = {} if args.until is None else {"until": args.until}
    return _show_endpoint(args, base.client().post(_path(args, "/pause"), body))


def cmd_disable(args: argparse.Namespace) -> int:
    body = {} if args.reason is None else {"reason": args.reason}
    return _show_endpoint(args, base.client().post(_path(args, "/disable"), body))


def cmd_enable(args: argparse.Namespace) -> int:
    return _show_endpoint(args, base.client().post(_path(args, "/enable")))


def cmd_health(args: argparse.Namespace) -> int:
    health = base.client().get(_path(args, "/health"), window_s=args.window_s)
    return base.print_one(args, health, HEALTH_COLUMNS)


def cmd_secrets(args: argparse.Namespace) -> int:
    data = base.client().get(_path(args, "/secrets"))["data"]
    return base.print_list(args, data, None, SECRET_COLUMNS, "secrets")


def cmd_rotate(args: argparse.Namespace) -> int:
    body = {} if args.overlap_s is None else {"overlap_s": args.overlap_s}
    data = base.client().post(_path(args, "/secrets/rotate"), body)
    return _print_secret(args, data, f"secret version {data['version']} created; older "
                                     f"versions stay valid for {data['overlap_s']:g} s")


def cmd_revoke_secret(args: argparse.Namespace) -> int:
    data = base.client().request("DELETE", _path(args, f"/secrets/{args.version}")).data
    return base.print_one(args, data, SECRET_COLUMNS)


def cmd_replay(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {}
    for name, key in (("since", "since"), ("until", "until"), ("statuses", "statuses"),
                      ("event_ids", "event_ids")):
        if getattr(args, name):
            body[key] = getattr(args, name)
    if args.kind == "replay" and not (args.since or args.event_ids):
        raise CommandError("give --since (and optionally --until) or --event-id: which "
                           "deliveries to replay", USAGE)
    return start_operation(args, _path(args, f"/{args.kind}"), body)


def register(sub: Any) -> None:
    eps = sub.add_parser(
        "endpoints", help="webhook endpoints: create, list, pause, replay, recover ...",
        description="Webhook endpoints, through the API (HOOKSTREAM_API_URL, "
                    "HOOKSTREAM_API_KEY). A tenant key sees its own; an operator key every "
                    "tenant's (name the tenant with --tenant where asked)."
    ).add_subparsers(dest="action", required=True, metavar="ACTION")

    def settings_args(p: argparse.ArgumentParser, *, creating: bool) -> None:
        p.add_argument("--url", required=creating,
                       help="https:// URL of the receiver (http:// and private addresses "
                            "only with HOOKSTREAM_ALLOW_PRIVATE_TARGETS on the API)")
        p.add_argument("--types", nargs="+", metavar="TYPE",
                       help="event types: 'invoice.paid', 'invoice.*' or '*' (default '*')")
        p.add_argument("--description")
        p.add_argument("--rate-per-s", type=float, help="requests per second (default 50)")
        p.add_argument("--burst", type=int, help="token bucket size (default 100)")
        p.add_argument("--max-in-flight", type=int, help="concurrent requests (default 4)")
        p.add_argument("--coalesce", action=argparse.BooleanOptionalAction, default=None,
                       help="a newer state event supersedes a pending older one (default on)")

    p = base.json_flag(eps.add_parser("create", help="register an endpoint; its signing "
                                                     "secret is printed once"))
    p.add_argument("--tenant", help="the tenant (an operator key must name it)")
    settings_args(p, creating=True)
    p.set_defaults(fn=cmd_create)
    p = base.json_flag(eps.add_parser("import", help="register many from a JSON file "
                                                     "(good ones are kept; exit 1 if any failed)"))
    p.add_argument("file", help='a JSON list of endpoint objects, or {"endpoints": [...]}')
    p.set_defaults(fn=cmd_import)
    p = base.list_flags(eps.add_parser("list", help="endpoints, oldest first"))
    p.add_argument("--tenant", help="an operator key: only this tenant's")
    p.add_argument("--status", choices=STATUSES)
    p.set_defaults(fn=cmd_list)

    def one(name: str, help_text: str, fn: Any) -> argparse.ArgumentParser:
        p = base.json_flag(eps.add_parser(name, help=help_text))
        p.add_argument("endpoint_id", type=base.uuid_arg, metavar="ENDPOINT_ID")
        p.set_defaults(fn=fn)
        return p

    one("show", "one endpoint", cmd_show)
    settings_args(one("update", "change settings (config_version goes up)", cmd_update),
                  creating=False)
    one("delete", "delete it (its deliveries are removed in the background)", cmd_delete)
    one("pause", "hold deliveries (new ones are created and held)", cmd_pause).add_argument(
        "--until", type=base.time_arg, help="resume by itself then (ISO 8601 or now+2h); "
                                            "default: until enabled")
    one("disable", "stop: no new deliveries; pending ones are held", cmd_disable).add_argument(
        "--reason", help="shown to the tenant")
    one("enable", "re-enable or resume (closes the circuit; held work is sent)", cmd_enable)
    one("health", "backlog, circuit, last error, success rate", cmd_health).add_argument(
        "--window-s", type=int, default=None, help="success-rate window (default 3600)")
    one("secrets", "signing secret versions and expiry (never the values)", cmd_secrets)
    one("rotate-secret", "new secret (printed once); older ones overlap",
        cmd_rotate).add_argument("--overlap-s", type=float,
                                 help="how long older secrets stay valid (0: revoke now; "
                                      "default the API's HOOKSTREAM_SECRET_OVERLAP_S)")
    one("revoke-secret", "revoke an older secret version now",
        cmd_revoke_secret).add_argument("version", type=int)

    for kind, help_text in (
            ("replay", "send deliveries again (a bulk operation): by time and/or event ids"),
            ("recover", "re-enable, then replay what failed since the failure streak began")):
        p = one(kind, help_text, cmd_replay)
        p.set_defaults(kind=kind)
        p.add_argument("--since", type=base.time_arg,
                       help="deliveries created from this time (ISO 8601 or now-2h)"
                            + ("; required unless --event-id" if kind == "replay" else
                               "; default: when the failures began"))
        p.add_argument("--until", type=base.time_arg, help="... until this time (default now)")
        p.add_argument("--status", dest="statuses", action="append", choices=REPLAYABLE,
                       help="only deliveries in this state (repeatable; default "
                            + ("every finished state" if kind == "replay" else "failed, dead")
                            + ")")
        if kind == "replay":
            p.add_argument("--event-id", dest="event_ids", action="append",
                           type=base.uuid_arg, help="only this event's delivery (repeatable)")
        else:
            p.set_defaults(event_ids=None)
        p.add_argument("--wait", action="store_true",
                       help="wait for the operation to finish, with a progress bar")
        p.add_argument("--timeout-s", type=float, default=600.0,
                       help="with --wait: give up waiting after this long (default 600)")
