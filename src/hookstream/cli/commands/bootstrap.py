"""Bootstrap commands: ``hookstream tenants | apikeys ...``, straight to PostgreSQL.

The first operator key cannot need a key, so these talk to the database
(``HOOKSTREAM_DATABASE_URL``) through the same validation and use cases as the API
(``hookstream.controlplane.tenants``); everything else goes through the API (the other
``hookstream.cli.commands``). Keys are printed
once and never stored in clear.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from hookstream.cli import output
from hookstream.controlplane import tenants, views
from hookstream.controlplane import validation as v
from hookstream.controlplane.store import Conn
from hookstream.core.settings import ApiSettings, from_env
from hookstream.io.pg import translating

Action = Callable[[Conn, argparse.Namespace], Awaitable[Any]]
Render = Callable[[Any], None]
CONNECT_TIMEOUT_S = 5

TENANT_COLUMNS: list[output.Column] = [
    ("id", output.field("id")), ("name", output.field("name")),
    ("created", output.field("created_at"))]
KEY_COLUMNS: list[output.Column] = [
    ("id", output.field("id")), ("tenant", lambda k: k["tenant"] or "(operator)"),
    ("name", output.field("name")), ("prefix", output.field("prefix")),
    ("created", output.field("created_at")), ("revoked", output.field("revoked_at"))]


def uuid_arg(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a UUID: {raw!r}") from None


def _execute(action: Action, render: Render, args: argparse.Namespace) -> int:
    settings = from_env(ApiSettings)

    async def run() -> Any:
        with translating():
            async with await psycopg.AsyncConnection.connect(
                    settings.database_url, row_factory=dict_row,
                    connect_timeout=CONNECT_TIMEOUT_S) as conn, conn.transaction():
                return await action(conn, args)

    result = asyncio.run(run())
    if args.json:
        output.as_json(result)
    else:
        render(result)
    return 0


def _command(action: Action, render: Render) -> Callable[[argparse.Namespace], int]:
    return lambda args: _execute(action, render, args)


def _token_line(token: str) -> None:
    print(f"token:   {token}\n         (shown once: store it now; only its hash is kept)")


# -- tenants -------------------------------------------------------------------------------
async def tenants_create(conn: Conn, a: argparse.Namespace) -> Any:
    tenant = v.tenant_id(a.id, "id")
    row = await tenants.create_tenant(conn, tenant, v.text(a.name, "name", max_len=v.MAX_NAME))
    out: dict[str, Any] = {"tenant": views.tenant(row)}
    if not a.no_key:
        key, token = await tenants.issue_key(conn, tenant, "initial")
        out["api_key"] = {**views.api_key(key), "token": token}
    return out


def _render_tenant_created(result: Any) -> None:
    print(f"tenant {result['tenant']['id']} created")
    if "api_key" in result:
        print(f"api key {result['api_key']['id']} ({result['api_key']['prefix']}…)")
        _token_line(result["api_key"]["token"])


async def tenants_list(conn: Conn, _a: argparse.Namespace) -> Any:
    return [views.tenant(r) for r in await tenants.list_tenants(conn, None, 100_000)]


# -- API keys ------------------------------------------------------------------------------
async def keys_create(conn: Conn, a: argparse.Namespace) -> Any:
    tenant = None if a.operator else v.tenant_id(a.tenant)
    row, token = await tenants.issue_key(conn, tenant, v.text(a.name, "name",
                                                              max_len=v.MAX_NAME))
    return {**views.api_key(row), "token": token}


def _render_key_created(key: Any) -> None:
    who = "operator key (every tenant)" if key["operator"] else f"key of tenant {key['tenant']}"
    print(f"{who} {key['id']} created ({key['prefix']}…)")
    _token_line(key["token"])


async def keys_list(conn: Conn, a: argparse.Namespace) -> Any:
    tenant = None if a.tenant is None else v.tenant_id(a.tenant)
    rows = await tenants.list_keys(conn, tenant, every=tenant is None and not a.operator)
    return [views.api_key(r) for r in rows]


async def keys_revoke(conn: Conn, a: argparse.Namespace) -> Any:
    return views.api_key(await tenants.revoke_key(conn, a.key_id))


def _json_flag(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    return p


def register(sub: Any) -> None:
    """Add the bootstrap commands to ``hookstream``'s subcommand parser."""
    tenant_actions = sub.add_parser(
        "tenants", help="tenants (bootstrap, PostgreSQL)",
        description="Create and list tenants, straight in HOOKSTREAM_DATABASE_URL."
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = _json_flag(tenant_actions.add_parser("create", help="create a tenant and print its first "
                                                     "API key (once)"))
    p.add_argument("id", help="lower-case letters, digits, '_', '.', '-'")
    p.add_argument("--name", default="")
    p.add_argument("--no-key", action="store_true", help="do not create an API key")
    p.set_defaults(fn=_command(tenants_create, _render_tenant_created))
    p = _json_flag(tenant_actions.add_parser("list", help="every tenant"))
    p.set_defaults(fn=_command(tenants_list, lambda rows: output.listing(
        rows, TENANT_COLUMNS, noun="tenants")))

    keys = sub.add_parser(
        "apikeys", help="API keys (bootstrap, PostgreSQL)",
        description="Create, list and revoke API keys, straight in HOOKSTREAM_DATABASE_URL. "
                    "An operator key acts on every tenant; a tenant key on its tenant only."
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = _json_flag(keys.add_parser("create", help="create a key; the token is printed once"))
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--tenant")
    who.add_argument("--operator", action="store_true", help="a key for every tenant")
    p.add_argument("--name", default="")
    p.set_defaults(fn=_command(keys_create, _render_key_created))
    p = _json_flag(keys.add_parser("list", help="keys (never their tokens)"))
    p.add_argument("--tenant", help="only this tenant's keys")
    p.add_argument("--operator", action="store_true", help="only operator keys")
    p.set_defaults(fn=_command(keys_list, lambda rows: output.listing(
        rows, KEY_COLUMNS, noun="API keys")))
    p = _json_flag(keys.add_parser("revoke", help="revoke a key (effective at once)"))
    p.add_argument("key_id", type=uuid_arg)
    p.set_defaults(fn=_command(keys_revoke, lambda key: print(
        f"API key {key['id']} revoked at {output.cell(key['revoked_at'])}")))
