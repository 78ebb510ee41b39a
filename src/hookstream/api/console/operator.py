"""The operator console (an operator key's session): the fleet's worst endpoints by
oldest pending age, bulk operations in progress, dead letters, quarantined outbox rows,
every tenant (``hookstream.controlplane.fleet``), and links to the Grafana dashboard
(deploy/grafana). A tenant's session gets "not found" here, like any page that is not
its own.
"""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from hookstream.api.console.context import (
    PAGE_SIZE,
    api_of,
    console_of,
    page,
    query_cursor,
    viewer,
)
from hookstream.api.console.paging import link, page_of
from hookstream.controlplane import fleet
from hookstream.controlplane import validation as v
from hookstream.controlplane.errors import invalid

# The dashboard in deploy/grafana/dashboards/hookstream.json (its uid).
DASHBOARD_PATH = "/d/hookstream/hookstream"


def _quarantine_cursor(raw: str | None) -> tuple[datetime, int] | None:
    # the API's cursor form holds a UUID; outbox rows are keyed by a bigint id
    if not raw:
        return None
    at, _, ident = raw.partition("_")
    if not ident.isdigit() or len(ident) > 19:
        raise invalid("cursor", "not a cursor this page made")
    return v.timestamp(at, "cursor"), int(ident)


def grafana_links(base: str) -> list[tuple[str, str]]:
    if not base:
        return []
    dash = base + DASHBOARD_PATH
    return [("Dashboard (last hour)", dash + "?from=now-1h&to=now"),
            ("Dashboard (last 24 hours)", dash + "?from=now-24h&to=now")]


async def overview(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    seen = await fleet.overview(api_of(request))
    return page(request, "ops.html", worst=seen.worst, running=seen.running, dead=seen.dead,
                quarantined=seen.quarantined,
                grafana=grafana_links(console_of(request).settings.console_grafana_url))


async def tenants(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    raw = v.single(request.query, "cursor")
    after = v.tenant_id(raw, "cursor") if raw else None
    rows = await fleet.tenants(api_of(request), after, PAGE_SIZE + 1)
    more = len(rows) > PAGE_SIZE
    items = rows[:PAGE_SIZE]
    return page(request, "tenants.html", items=items,
                next_link=more and link("/console/ops/tenants", {}, cursor=items[-1]["id"]))


async def dead_letters(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    rows = await fleet.dead_deliveries(api_of(request), query_cursor(request.query),
                                       PAGE_SIZE + 1)
    found = page_of(rows, PAGE_SIZE, lambda r: (r["updated_at"], r["delivery_id"]))
    return page(request, "dead_letters.html", items=found.items,
                next_link=found.next_cursor and link("/console/ops/dead-letters", {},
                                                      cursor=found.next_cursor))


async def quarantine(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    rows = await fleet.quarantined(api_of(request),
                                   _quarantine_cursor(v.single(request.query, "cursor")),
                                   PAGE_SIZE + 1)
    items = rows[:PAGE_SIZE]
    cursor = (f"{items[-1]['quarantined_at'].isoformat()}_{items[-1]['id']}"
              if len(rows) > PAGE_SIZE else None)
    return page(request, "quarantine.html", items=items,
                next_link=cursor and link("/console/ops/quarantine", {}, cursor=cursor))


async def operations(request: web.Request) -> web.Response:
    await viewer(request, operator=True)
    return page(request, "operations.html",
                running=await fleet.running_operations(api_of(request), 100))
