"""The operator console (an operator key's session): the fleet's worst endpoints by
oldest pending age, bulk operations in progress, dead letters, quarantined outbox rows,
every tenant, and links to the Grafana dashboard (deploy/grafana). A tenant's session
gets "not found" here, like any page that is not its own.

Every list is bounded and index-driven: the worst endpoints are the same query the
metrics sampler runs (observability.sql), dead letters and quarantined rows walk small
partial indexes (migration 0010), newest first with keyset cursors.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from hookstream.api import store
from hookstream.api import validation as v
from hookstream.api.console.context import (
    PAGE_SIZE,
    api_of,
    console_of,
    page,
    query_cursor,
    viewer,
)
from hookstream.api.console.paging import link, page_of
from hookstream.api.errors import invalid
from hookstream.io import queries

Q = queries.load("console")
OBSERVABILITY = queries.load("observability")
WORST = 10
OVERVIEW_ROWS = 10
# The dashboard in deploy/grafana/dashboards/hookstream.json (its uid).
DASHBOARD_PATH = "/d/hookstream/hookstream"
_FAR_FUTURE = datetime(9999, 1, 1, tzinfo=UTC)
_MAX_UUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"


async def _rows(conn: store.Conn, sql: str, params: dict[str, Any]) -> list[store.Row]:
    return await (await conn.execute(sql, params)).fetchall()


async def _dead(conn: store.Conn, before: Any, limit: int) -> list[store.Row]:
    at, ident = before or (_FAR_FUTURE, _MAX_UUID)
    return await _rows(conn, Q["dead_letters"], {"before_at": at, "before_id": ident,
                                                 "limit": limit})


def _quarantine_cursor(raw: str | None) -> tuple[datetime, int] | None:
    # the API's cursor form holds a UUID; outbox rows are keyed by a bigint id
    if not raw:
        return None
    at, _, ident = raw.partition("_")
    if not ident.isdigit() or len(ident) > 19:
        raise invalid("cursor", "not a cursor this page made")
    return v.timestamp(at, "cursor"), int(ident)


async def _quarantined(conn: store.Conn, before: tuple[datetime, int] | None,
                       limit: int) -> list[store.Row]:
    at, ident = before or (_FAR_FUTURE, 2**63 - 1)
    return await _rows(conn, Q["quarantined_outbox"], {"before_at": at, "before_id": ident,
                                                       "limit": limit})


def grafana_links(base: str) -> list[tuple[str, str]]:
    if not base:
        return []
    dash = base + DASHBOARD_PATH
    return [("Dashboard (last hour)", dash + "?from=now-1h&to=now"),
            ("Dashboard (last 24 hours)", dash + "?from=now-24h&to=now")]


async def overview(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    async with api_of(request).conn() as conn:
        worst = await _rows(conn, OBSERVABILITY["worst_endpoints"], {"limit": WORST})
        running = await _rows(conn, Q["running_operations"], {"limit": OVERVIEW_ROWS})
        dead = await _dead(conn, None, OVERVIEW_ROWS)
        quarantined = await _quarantined(conn, None, OVERVIEW_ROWS)
    return page(request, "ops.html", worst=worst, running=running, dead=dead,
                quarantined=quarantined,
                grafana=grafana_links(console_of(request).settings.console_grafana_url))


async def tenants(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    raw = v.single(request.query, "cursor")
    after = v.tenant_id(raw, "cursor") if raw else None
    async with api_of(request).conn() as conn:
        rows = await store.list_tenants(conn, after, PAGE_SIZE + 1)
    more = len(rows) > PAGE_SIZE
    items = rows[:PAGE_SIZE]
    return page(request, "tenants.html", items=items,
                next_link=more and link("/console/ops/tenants", {}, cursor=items[-1]["id"]))


async def dead_letters(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    async with api_of(request).conn() as conn:
        rows = await _dead(conn, query_cursor(request.query), PAGE_SIZE + 1)
    found = page_of(rows, PAGE_SIZE, lambda r: (r["updated_at"], r["delivery_id"]))
    return page(request, "dead_letters.html", items=found.items,
                next_link=found.next_cursor and link("/console/ops/dead-letters", {},
                                                      cursor=found.next_cursor))


async def quarantine(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    async with api_of(request).conn() as conn:
        rows = await _quarantined(conn, _quarantine_cursor(v.single(request.query, "cursor")),
                                  PAGE_SIZE + 1)
    items = rows[:PAGE_SIZE]
    cursor = (f"{items[-1]['quarantined_at'].isoformat()}_{items[-1]['id']}"
              if len(rows) > PAGE_SIZE else None)
    return page(request, "quarantine.html", items=items,
                next_link=cursor and link("/console/ops/quarantine", {}, cursor=cursor))


async def operations(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    async with api_of(request).conn() as conn:
        running = await _rows(conn, Q["running_operations"], {"limit": 100})
    return page(request, "operations.html", running=running)
