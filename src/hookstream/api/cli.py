"""Operator commands: ``hookstream tenants | apikeys | endpoints ...``.

They talk to PostgreSQL directly (an operator has the database URL, and bootstrapping
the first operator key cannot need a key) through the same validation and named
queries as the API, so both paths obey the same rules. Output is JSON on stdout;
secrets and keys are printed once and never stored in clear.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import orjson
import psycopg
from psycopg.rows import dict_row

from hookstream.api import rules, store, views
from hookstream.api import validation as v
from hookstream.api.errors import ApiError
from hookstream.api.tasks import now_utc
from hookstream.core.settings import ApiSettings, SettingsError, from_env
from hookstream.endpoints import STATUSES
from hookstream.io.pg import DatabaseUnavailable, DataRejected, translating

Action = Callable[[store.Conn, ApiSettings, argparse.Namespace], Awaitable[Any]]


def _emit(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


def _execute(action: Action, args: argparse.Namespace) -> int:
    try:
        settings = from_env(ApiSettings)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2

    async def run() -> Any:
        with translating():
            async with await psycopg.AsyncConnection.connect(
                    settings.database_url, row_factory=dict_row) as conn, conn.transaction():
                return await action(conn, settings, args)

    try:
        _emit(asyncio.run(run()))
    except ApiError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except DatabaseUnavailable as exc:
        print(f"database unavailable: {exc}", file=sys.stderr)
        return 1
    except DataRejected as exc:
        print(f"refused by the database: {exc}", file=sys.stderr)
        return 1
    return 0


def _command(action: Action) -> Callable[[argparse.Namespace], int]:
    return lambda args: _execute(action, args)


def _uuid(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a UUID: {raw!r}") from None


# -- tenants and keys --------------------------------------------------------------------
async def tenants_create(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    tenant = v.tenant_id(a.id, "id")
    row = await store.create_tenant(conn, tenant, v.text(a.name, "name", max_len=v.MAX_NAME))
    out: dict[str, Any] = {"tenant": views.tenant(row)}
    if not a.no_key:
        key, token = await store.create_api_key(conn, tenant, "initial")
        out["api_key"] = {**views.api_key(key), "token": token}
    return out


async def tenants_list(conn: store.Conn, _s: ApiSettings, _a: argparse.Namespace) -> Any:
    return [views.tenant(r) for r in await store.list_tenants(conn, None, 100_000)]


async def keys_create(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    tenant = None if a.operator else v.tenant_id(a.tenant)
    if tenant is not None:
        await store.require_tenant(conn, tenant)
    row, token = await store.create_api_key(conn, tenant, v.text(a.name, "name",
                                                                 max_len=v.MAX_NAME))
    return {**views.api_key(row), "token": token}


async def keys_list(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    tenant = None if a.tenant is None else v.tenant_id(a.tenant)
    rows = await store.list_api_keys(conn, tenant, every=tenant is None and not a.operator)
    return [views.api_key(r) for r in rows]


async def keys_revoke(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    return views.api_key(await store.revoke_api_key(conn, a.key_id))


# -- endpoints (as an operator: every tenant) --------------------------------------------
async def endpoints_create(conn: store.Conn, s: ApiSettings, a: argparse.Namespace) -> Any:
    body: dict[str, Any] = {"tenant": a.tenant, "url": a.url, "event_types": a.types,
                            "description": a.description, "coalesce": not a.no_coalesce}
    for name in ("rate_per_s", "burst", "max_in_flight"):
        if getattr(a, name) is not None:
            body[name] = getattr(a, name)
    spec = v.endpoint_create(body, allow_insecure=s.allow_private_targets)
    assert spec.tenant is not None
    await store.require_tenant(conn, spec.tenant)
    row, secret = await store.create_endpoint(conn, spec.tenant, spec)
    return {**views.endpoint(row), "secret": secret}


async def endpoints_list(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    tenant = None if a.tenant is None else v.tenant_id(a.tenant)
    status = None if a.status is None else [a.status]
    return [views.endpoint(r) for r in
            await store.list_endpoints(conn, tenant, status, None, 100_000)]


async def endpoints_show(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    return views.endpoint(await store.get_endpoint(conn, a.endpoint_id, None))


async def _transition(conn: store.Conn, endpoint_id: uuid.UUID, action: str,
                      **columns: Any) -> Any:
    ep = await store.get_endpoint(conn, endpoint_id, None, lock=True)
    status = rules.next_status(ep["status"], action)
    return views.endpoint(await store.set_endpoint_status(conn, endpoint_id, status, **columns))


async def endpoints_pause(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    until = v.pause({} if a.until is None else {"until": a.until}, now=now_utc())
    return await _transition(conn, a.endpoint_id, "pause", paused_until=until)


async def endpoints_disable(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    reason = v.disable({"reason": a.reason})
    return await _transition(conn, a.endpoint_id, "disable", disabled_reason=reason)


async def endpoints_enable(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    return await _transition(conn, a.endpoint_id, "enable")


async def endpoints_delete(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    await store.delete_endpoint(conn, a.endpoint_id, None)
    return {"deleted": a.endpoint_id}


async def endpoints_rotate(conn: store.Conn, s: ApiSettings, a: argparse.Namespace) -> Any:
    body = {} if a.overlap_s is None else {"overlap_s": a.overlap_s}
    overlap_s = v.rotation(body, default_overlap_s=s.secret_overlap_s)
    ep = await store.get_endpoint(conn, a.endpoint_id, None, lock=True)
    row, secret = await store.rotate_secret(conn, ep["id"], overlap_s)
    return {"version": row["version"], "secret": secret, "overlap_s": overlap_s}


async def endpoints_health(conn: store.Conn, _s: ApiSettings, a: argparse.Namespace) -> Any:
    now = now_utc()
    ep = await store.get_endpoint(conn, a.endpoint_id, None)
    counts, last_error = await store.endpoint_health(conn, ep["id"], now - timedelta(hours=1))
    return views.health(ep, counts, last_error, now=now, window_s=3600)


def register(sub: Any) -> None:
    """Add the control-plane commands to ``hookstream``'s subcommand parser."""
    tenants = sub.add_parser("tenants", help="tenants (operator)").add_subparsers(
        dest="action", required=True)
    p = tenants.add_parser("create", help="create a tenant and print its first API key")
    p.add_argument("id")
    p.add_argument("--name", default="")
    p.add_argument("--no-key", action="store_true", help="do not create an API key")
    p.set_defaults(fn=_command(tenants_create))
    tenants.add_parser("list").set_defaults(fn=_command(tenants_list))

    keys = sub.add_parser("apikeys", help="API keys (operator)").add_subparsers(
        dest="action", required=True)
    p = keys.add_parser("create", help="create a key; the token is printed once")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--tenant")
    who.add_argument("--operator", action="store_true", help="a key for every tenant")
    p.add_argument("--name", default="")
    p.set_defaults(fn=_command(keys_create))
    p = keys.add_parser("list")
    p.add_argument("--tenant")
    p.add_argument("--operator", action="store_true", help="only operator keys")
    p.set_defaults(fn=_command(keys_list))
    p = keys.add_parser("revoke")
    p.add_argument("key_id", type=_uuid)
    p.set_defaults(fn=_command(keys_revoke))

    eps = sub.add_parser("endpoints", help="webhook endpoints (operator)").add_subparsers(
        dest="action", required=True)
    p = eps.add_parser("create", help="register an endpoint; the secret is printed once")
    p.add_argument("--tenant", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--types", nargs="+", default=["*"], metavar="TYPE",
                   help="'invoice.paid', 'invoice.*' or '*'")
    p.add_argument("--description", default="")
    p.add_argument("--rate-per-s", type=float)
    p.add_argument("--burst", type=int)
    p.add_argument("--max-in-flight", type=int)
    p.add_argument("--no-coalesce", action="store_true")
    p.set_defaults(fn=_command(endpoints_create))
    p = eps.add_parser("list")
    p.add_argument("--tenant")
    p.add_argument("--status", choices=STATUSES)
    p.set_defaults(fn=_command(endpoints_list))
    for name, action, help_text in (
            ("show", endpoints_show, "one endpoint"),
            ("enable", endpoints_enable, "re-enable (closes the circuit)"),
            ("delete", endpoints_delete, "delete with its deliveries"),
            ("health", endpoints_health, "backlog, circuit, last error, success rate")):
        p = eps.add_parser(name, help=help_text)
        p.add_argument("endpoint_id", type=_uuid)
        p.set_defaults(fn=_command(action))
    p = eps.add_parser("pause")
    p.add_argument("endpoint_id", type=_uuid)
    p.add_argument("--until", help="ISO 8601 time; without it, until enabled")
    p.set_defaults(fn=_command(endpoints_pause))
    p = eps.add_parser("disable")
    p.add_argument("endpoint_id", type=_uuid)
    p.add_argument("--reason", default="disabled by an operator")
    p.set_defaults(fn=_command(endpoints_disable))
    p = eps.add_parser("rotate-secret", help="new secret (printed once); old one overlaps")
    p.add_argument("endpoint_id", type=_uuid)
    p.add_argument("--overlap-s", type=float, help="0 revokes the old secret at once")
    p.set_defaults(fn=_command(endpoints_rotate))
