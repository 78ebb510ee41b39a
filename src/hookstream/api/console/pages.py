"""The tenant portal's pages (GET): endpoints, deliveries, attempts, events, secrets,
operations. Each reads through the API's own queries (``hookstream.api.store``) with
the viewer's tenant as the scope, so another tenant's ids are "not found" here exactly
as in the JSON API; an operator sees every tenant.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp import web

from hookstream.api import auth, rules, store, views
from hookstream.api import validation as v
from hookstream.api.console import forms
from hookstream.api.console.context import (
    PAGE_SIZE,
    api_of,
    page,
    query_cursor,
    query_tenant,
    query_time,
    query_uuid,
    viewer,
)
from hookstream.api.console.paging import link, page_of
from hookstream.api.errors import invalid
from hookstream.api.tasks import now_utc
from hookstream.endpoints import STATUSES
from hookstream.io import queries

Q = queries.load("console")
HEALTH_WINDOW_S = 3600
RECENT_DELIVERIES = 10
RECENT_OPERATIONS = 5
LIVE_DELIVERY = ("pending", "in_flight")  # the attempts view refreshes itself meanwhile


def _uuid(request: web.Request, name: str) -> Any:
    return v.uuid_value(request.match_info[name], name)


async def _health(conn: store.Conn, ep: store.Row) -> dict[str, Any]:
    now = now_utc()
    counts, last_error = await store.endpoint_health(
        conn, ep["id"], now - timedelta(seconds=HEALTH_WINDOW_S))
    return views.health(ep, counts, last_error, now=now, window_s=HEALTH_WINDOW_S)


async def endpoints(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    q = request.query
    tenant = auth.listing_tenant(viewing.principal, query_tenant(q))
    status = v.choices_param(q, "status", STATUSES)
    async with api_of(request).conn() as conn:
        rows = await store.list_endpoints(conn, tenant, status, query_cursor(q), PAGE_SIZE + 1)
        found = page_of(rows, PAGE_SIZE, lambda r: (r["created_at"], r["id"]))
        items = [{"ep": r, "health": await _health(conn, r)} for r in found.items]
    filters = {"tenant": tenant if viewing.operator else None, "status": status or []}
    return page(request, "endpoints.html", items=items, filters=filters, statuses=STATUSES,
                next_link=found.next_cursor and link("/console/endpoints", filters,
                                                      cursor=found.next_cursor))


async def endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    endpoint_id = _uuid(request, "endpoint_id")
    api = api_of(request)
    async with api.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, viewing.scope)
        health = await _health(conn, ep)
        recent = await store.list_deliveries(
            conn, tenant=viewing.scope, endpoint_id=endpoint_id,
            statuses=v.DELIVERY_STATUSES, since=api.oldest(),
            until=now_utc() + timedelta(days=1), before=None, limit=RECENT_DELIVERIES)
        cur = await conn.execute(Q["endpoint_operations"], {
            "tenant": ep["tenant"], "endpoint_id": endpoint_id, "limit": RECENT_OPERATIONS})
        operations = await cur.fetchall()
    return page(request, "endpoint.html", ep=ep, health=health, deliveries=recent,
                operations=operations, replayable=v.REPLAYABLE,
                default_since=now_utc() - timedelta(hours=1))


async def new_endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    values = forms.endpoint_values(None)
    if viewing.operator:
        values["tenant"] = query_tenant(request.query) or ""
    return page(request, "endpoint_form.html", ep=None, values=values, error=None)


async def edit_endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    async with api_of(request).conn() as conn:
        ep = await store.get_endpoint(conn, _uuid(request, "endpoint_id"), viewing.scope)
    return page(request, "endpoint_form.html", ep=ep, values=forms.endpoint_values(ep),
                error=None)


async def deliveries(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    q = request.query
    api = api_of(request)
    endpoint_id = query_uuid(q, "endpoint_id")
    requested = query_tenant(q)
    if viewing.operator and requested is None and endpoint_id is None:
        raise invalid("endpoint_id", "pick an endpoint (or a tenant) first")
    tenant = auth.listing_tenant(viewing.principal, requested)
    statuses = v.choices_param(q, "status", v.DELIVERY_STATUSES)
    since = query_time(q, "since")
    until = query_time(q, "until")
    async with api.conn() as conn:
        ep = None if endpoint_id is None else await store.get_endpoint(conn, endpoint_id, tenant)
        rows = await store.list_deliveries(
            conn, tenant=tenant, endpoint_id=endpoint_id,
            statuses=statuses or v.DELIVERY_STATUSES, since=since or api.oldest(),
            until=until or now_utc() + timedelta(days=1), before=query_cursor(q),
            limit=PAGE_SIZE + 1)
    found = page_of(rows, PAGE_SIZE, lambda r: (r["created_at"], r["delivery_id"]))
    filters = {"endpoint_id": endpoint_id, "tenant": requested if viewing.operator else None,
               "status": statuses or [], "since": q.get("since", ""),
               "until": q.get("until", "")}
    return page(request, "deliveries.html", ep=ep, items=found.items, filters=filters,
                statuses=v.DELIVERY_STATUSES,
                next_link=found.next_cursor and link("/console/deliveries", filters,
                                                      cursor=found.next_cursor))


async def _delivery_view(request: web.Request) -> dict[str, Any]:
    viewing = await viewer(request)
    delivery_id = _uuid(request, "delivery_id")
    async with api_of(request).conn() as conn:
        d = await store.get_delivery(conn, delivery_id, viewing.scope)
        attempts = await store.delivery_attempts(conn, delivery_id)
        ep = await store.get_endpoint(conn, d["endpoint_id"], viewing.scope)
    refusal = rules.replay_refusal(d["status"], ep["status"])
    return {"d": d, "attempts": attempts, "ep": ep, "live": d["status"] in LIVE_DELIVERY,
            "replay_refusal": None if refusal is None else refusal.message}


async def delivery(request: web.Request) -> web.Response:
    view = await _delivery_view(request)
    async with api_of(request).conn() as conn:
        event = await store.get_event(conn, view["d"]["event_id"], view["d"]["tenant"])
    return page(request, "delivery.html", event=event, **view)


async def delivery_live(request: web.Request) -> web.Response:
    """The status and attempts part of a delivery's page, polled by htmx while the
    delivery is queued or in flight; once it is not, the answer stops the polling."""
    return page(request, "_delivery_live.html", **await _delivery_view(request))


async def events(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    q = request.query
    api = api_of(request)
    endpoint_id = query_uuid(q, "endpoint_id")
    patterns = v.type_patterns_param(q)
    requested = query_tenant(q)
    oldest = api.oldest()
    since = query_time(q, "since") or oldest
    if since < oldest:
        raise invalid("since", f"events are kept for {api.settings.history_days} days")
    until = query_time(q, "until") or now_utc() + timedelta(days=1)
    async with api.conn() as conn:
        if endpoint_id is not None:
            ep = await store.get_endpoint(conn, endpoint_id,
                                          auth.listing_tenant(viewing.principal, requested))
            tenant, patterns = ep["tenant"], patterns or ep["event_types"]
        elif viewing.operator and requested is None:
            raise invalid("tenant", "pick a tenant first")
        else:
            tenant = auth.acting_tenant(viewing.principal, requested)
        rows = await store.list_events(conn, tenant=tenant, patterns=patterns, since=since,
                                       until=until, after=query_cursor(q), limit=PAGE_SIZE + 1)
    found = page_of(rows, PAGE_SIZE, lambda r: (r["occurred_at"], r["event_id"]))
    filters = {"endpoint_id": endpoint_id, "tenant": requested if viewing.operator else None,
               "type": q.get("type", ""), "since": q.get("since", ""),
               "until": q.get("until", "")}
    return page(request, "events.html", items=found.items, filters=filters, tenant=tenant,
                next_link=found.next_cursor and link("/console/events", filters,
                                                      cursor=found.next_cursor))


async def event(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    async with api_of(request).conn() as conn:
        row = await store.get_event(conn, _uuid(request, "event_id"), viewing.scope)
    return page(request, "event.html", event=row)


async def secrets(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    async with api_of(request).conn() as conn:
        ep = await store.get_endpoint(conn, _uuid(request, "endpoint_id"), viewing.scope)
        rows = await store.list_secrets(conn, ep["id"])
    return page(request, "secrets.html", ep=ep, secrets=rows, new_secret=None,
                default_overlap_s=api_of(request).settings.secret_overlap_s)


async def _operation_view(request: web.Request) -> dict[str, Any]:
    viewing = await viewer(request)
    async with api_of(request).conn() as conn:
        op = await store.get_operation(conn, _uuid(request, "operation_id"), viewing.scope)
    return {"op": op, "view": views.operation(op)}


async def operation(request: web.Request) -> web.Response:
    return page(request, "operation.html", **await _operation_view(request))


async def operation_live(request: web.Request) -> web.Response:
    """The progress part of an operation's page, polled by htmx until it finished."""
    return page(request, "_operation_live.html", **await _operation_view(request))
