"""The tenant portal's pages (GET): endpoints, deliveries, attempts, events, secrets,
operations. Each reads through the control plane's use cases with the viewer's tenant
as the scope, so another tenant's ids are "not found" here exactly as in the JSON API;
an operator sees every tenant.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp import web

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
from hookstream.controlplane import auth, deliveries, endpoints, events, replay, secrets, views
from hookstream.controlplane import validation as v
from hookstream.controlplane.errors import invalid
from hookstream.controlplane.tasks import now_utc
from hookstream.endpoints import STATUSES

HEALTH_WINDOW_S = 3600
LIVE_DELIVERY = ("pending", "in_flight")  # the attempts view refreshes itself meanwhile


def _uuid(request: web.Request, name: str) -> Any:
    return v.uuid_value(request.match_info[name], name)


async def endpoints_page(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    q = request.query
    tenant = auth.listing_tenant(viewing.principal, query_tenant(q))
    status = v.choices_param(q, "status", STATUSES)
    listed = await endpoints.list_with_health(api_of(request), tenant, status, query_cursor(q),
                                              PAGE_SIZE + 1, window_s=HEALTH_WINDOW_S)
    found = page_of([ep for ep, _ in listed], PAGE_SIZE, lambda r: (r["created_at"], r["id"]))
    items = [{"ep": ep, "health": health} for ep, health in listed[:PAGE_SIZE]]
    filters = {"tenant": tenant if viewing.operator else None, "status": status or []}
    return page(request, "endpoints.html", items=items, filters=filters, statuses=STATUSES,
                next_link=found.next_cursor and link("/console/endpoints", filters,
                                                      cursor=found.next_cursor))


async def endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    endpoint_id = _uuid(request, "endpoint_id")
    seen = await endpoints.overview(api_of(request), endpoint_id, viewing.scope,
                                    window_s=HEALTH_WINDOW_S)
    return page(request, "endpoint.html", ep=seen.endpoint, health=seen.health,
                deliveries=seen.deliveries, operations=seen.operations,
                replayable=v.REPLAYABLE, default_since=now_utc() - timedelta(hours=1))


async def new_endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    values = forms.endpoint_values(None)
    if viewing.operator:
        values["tenant"] = query_tenant(request.query) or ""
    return page(request, "endpoint_form.html", ep=None, values=values, error=None)


async def edit_endpoint(request: web.Request) -> web.Response:
    viewing = await viewer(request, write=True)
    ep = await endpoints.get_endpoint(api_of(request), _uuid(request, "endpoint_id"),
                                      viewing.scope)
    return page(request, "endpoint_form.html", ep=ep, values=forms.endpoint_values(ep),
                error=None)


async def deliveries_page(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    q = request.query
    cp = api_of(request)
    endpoint_id = query_uuid(q, "endpoint_id")
    requested = query_tenant(q)
    if viewing.operator and requested is None and endpoint_id is None:
        raise invalid("endpoint_id", "pick an endpoint (or a tenant) first")
    tenant = auth.listing_tenant(viewing.principal, requested)
    statuses = v.choices_param(q, "status", v.DELIVERY_STATUSES)
    since = query_time(q, "since")
    until = query_time(q, "until")
    ep, rows = await deliveries.list_deliveries(
        cp, tenant=tenant, endpoint_id=endpoint_id,
        statuses=statuses or v.DELIVERY_STATUSES, since=since or cp.oldest(),
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
    seen = await deliveries.detail(api_of(request), _uuid(request, "delivery_id"),
                                   viewing.scope)
    return {"d": seen.delivery, "attempts": seen.attempts, "ep": seen.endpoint,
            "live": seen.delivery["status"] in LIVE_DELIVERY,
            "replay_refusal": seen.replay_refusal}


async def delivery(request: web.Request) -> web.Response:
    view = await _delivery_view(request)
    event = await events.get_event(api_of(request), view["d"]["event_id"], view["d"]["tenant"])
    return page(request, "delivery.html", event=event, **view)


async def delivery_live(request: web.Request) -> web.Response:
    """The status and attempts part of a delivery's page, polled by htmx while the
    delivery is queued or in flight; once it is not, the answer stops the polling."""
    return page(request, "_delivery_live.html", **await _delivery_view(request))


async def events_page(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    q = request.query
    cp = api_of(request)
    endpoint_id = query_uuid(q, "endpoint_id")
    patterns = v.type_patterns_param(q)
    requested = query_tenant(q)
    since = events.since_in_window(cp, query_time(q, "since"))
    until = query_time(q, "until") or now_utc() + timedelta(days=1)
    tenant, rows = await events.list_events(
        cp, viewing.principal, requested=requested, endpoint_id=endpoint_id,
        patterns=patterns, since=since, until=until, after=query_cursor(q),
        limit=PAGE_SIZE + 1, operator_without_tenant="pick a tenant first")
    found = page_of(rows, PAGE_SIZE, lambda r: (r["occurred_at"], r["event_id"]))
    filters = {"endpoint_id": endpoint_id, "tenant": requested if viewing.operator else None,
               "type": q.get("type", ""), "since": q.get("since", ""),
               "until": q.get("until", "")}
    return page(request, "events.html", items=found.items, filters=filters, tenant=tenant,
                next_link=found.next_cursor and link("/console/events", filters,
                                                      cursor=found.next_cursor))


async def event(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    row = await events.get_event(api_of(request), _uuid(request, "event_id"), viewing.scope)
    return page(request, "event.html", event=row)


async def secrets_page(request: web.Request) -> web.Response:
    viewing = await viewer(request)
    cp = api_of(request)
    ep, rows = await secrets.list_secrets(cp, _uuid(request, "endpoint_id"), viewing.scope)
    return page(request, "secrets.html", ep=ep, secrets=rows, new_secret=None,
                default_overlap_s=cp.settings.secret_overlap_s)


async def _operation_view(request: web.Request) -> dict[str, Any]:
    viewing = await viewer(request)
    op = await replay.get_operation(api_of(request), _uuid(request, "operation_id"),
                                    viewing.scope)
    return {"op": op, "view": views.operation(op)}


async def operation(request: web.Request) -> web.Response:
    return page(request, "operation.html", **await _operation_view(request))


async def operation_live(request: web.Request) -> web.Response:
    """The progress part of an operation's page, polled by htmx until it finished."""
    return page(request, "_operation_live.html", **await _operation_view(request))
