"""The control-plane HTTP API (aiohttp). Handlers stay thin: parse (``validation``),
decide (``auth``, ``rules``), run named queries (``store``), shape (``views``).

Every route is listed in ``ROUTES`` and described in ``openapi.yaml`` beside this file;
a unit test keeps the two in step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from importlib import resources
from typing import Any

import orjson
import psycopg
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from hookstream.api import auth, dead_letter_routes, outbox_routes, rules, store, views
from hookstream.api import validation as v
from hookstream.api.deletion import request_deletion
from hookstream.api.errors import ApiError, invalid, unauthorized, unavailable
from hookstream.api.handling import Ctx, Handler, Route, json_response, page
from hookstream.api.operations import Operations
from hookstream.api.tasks import TaskSink, now_utc, replay_tasks
from hookstream.core.settings import ApiSettings
from hookstream.core.topics import Topics
from hookstream.endpoints import STATUSES
from hookstream.io.kafka import BrokerUnavailable
from hookstream.io.pg import DatabaseUnavailable, DataRejected, translating
from hookstream.ops.observability import at_zero

log = logging.getLogger("hookstream.api")

DEFAULT_HEALTH_WINDOW_S = 3600
RECOVER_LOOKBACK = timedelta(days=1)
POOL_TIMEOUT_S = 5.0
MAX_BODY_BYTES = 1024 * 1024


# `kind` of hookstream_api_replays_total: one delivery, or an endpoint's replay/recover
REPLAY_KINDS = ("single", "replay", "recover")


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry):
        # Published at 0 from the start: every response the OpenAPI document promises
        # (bounded: a handful per route), each replay kind.
        self.requests = at_zero(Counter(
            "hookstream_api_requests_total", "Control-plane API requests",
            ["method", "route", "status"], registry=registry), documented_responses())
        self.replays = at_zero(Counter(
            "hookstream_api_replays_total",
            "Deliveries set back to pending for a manual replay", ["kind"], registry=registry),
            REPLAY_KINDS)


@dataclass
class Api:
    settings: ApiSettings
    pool: AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]
    sink: TaskSink
    operations: Operations
    metrics: ApiMetrics

    def conn(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[DictRow]]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        return self.pool.connection(timeout=POOL_TIMEOUT_S)

    def oldest(self) -> datetime:
        return now_utc() - timedelta(days=self.settings.history_days)


API = web.AppKey("hookstream_api", Api)
SETTINGS = web.AppKey("hookstream_api_settings", ApiSettings)
REGISTRY = web.AppKey("hookstream_api_registry", CollectorRegistry)


# -- authentication ----------------------------------------------------------------------
async def authenticate(api: Api, request: web.Request) -> auth.Principal:
    token = auth.bearer_token(request.headers.get("Authorization"))
    async with api.conn() as conn:
        principal = await store.principal(conn, token)
    if principal is None:
        raise unauthorized("invalid or revoked API key")
    return principal


def authed(handler: Handler, *, operator: bool = False) -> Callable[[web.Request], Awaitable[
        web.Response]]:
    async def wrapped(request: web.Request) -> web.Response:
        api = request.app[API]
        principal = await authenticate(api, request)
        if operator:
            auth.require_operator(principal)
        return await handler(Ctx(request, api, principal))

    wrapped.__name__ = handler.__name__
    return wrapped


# -- who am I ----------------------------------------------------------------------------
async def whoami(c: Ctx) -> web.Response:
    c.query()
    p = c.principal
    return json_response({"key_id": p.key_id, "tenant": p.tenant, "operator": p.operator})


# -- endpoints ---------------------------------------------------------------------------
async def create_endpoint(c: Ctx) -> web.Response:
    c.query()
    spec = v.endpoint_create(await c.body(), allow_insecure=c.settings.allow_private_targets)
    tenant = auth.acting_tenant(c.principal, spec.tenant)
    async with c.api.conn() as conn:
        await store.require_tenant(conn, tenant)
        row, secret = await store.create_endpoint(conn, tenant, spec, c.settings.secret_keys)
    return json_response({**views.endpoint(row), "secret": secret}, 201,
                         f"/v1/endpoints/{row['id']}")


async def import_endpoints(c: Ctx) -> web.Response:
    c.query()
    items = v.endpoint_import(await c.body(), max_items=c.settings.max_import_items)
    results: list[dict[str, Any]] = []
    # One transaction, a savepoint per item: good items are kept, bad ones explained.
    async with c.api.conn() as conn:
        for i, item in enumerate(items):
            prefix = f"endpoints[{i}]."
            try:
                if not isinstance(item, dict):
                    raise invalid(f"endpoints[{i}]", "must be an endpoint object")
                spec = v.endpoint_create(item, allow_insecure=c.settings.allow_private_targets,
                                         prefix=prefix)
                tenant = auth.acting_tenant(c.principal, spec.tenant, prefix + "tenant")
                async with conn.transaction():
                    await store.require_tenant(conn, tenant, prefix + "tenant")
                    row, secret = await store.create_endpoint(conn, tenant, spec,
                                                              c.settings.secret_keys)
            except ApiError as exc:
                results.append({"index": i, "status": exc.status, **exc.body()})
            else:
                results.append({"index": i, "status": 201, "endpoint": views.endpoint(row),
                                "secret": secret})
    return json_response({"results": results}, 207)


async def list_endpoints(c: Ctx) -> web.Response:
    q = c.query("tenant", "status", "cursor", "limit")
    tenant = auth.listing_tenant(c.principal, v.tenant_param(q))
    status = v.choices_param(q, "status", STATUSES)
    limit = v.limit_param(q)
    async with c.api.conn() as conn:
        rows = await store.list_endpoints(conn, tenant, status, v.cursor_param(q), limit + 1)
    return page([views.endpoint(r) for r in rows], rows, limit,
                lambda r: (r["created_at"], r["id"]))


async def get_endpoint(c: Ctx) -> web.Response:
    c.query()
    async with c.api.conn() as conn:
        row = await store.get_endpoint(conn, c.path_uuid("endpoint_id"), c.scope)
    return json_response(views.endpoint(row))


async def update_endpoint(c: Ctx) -> web.Response:
    c.query()
    endpoint_id = c.path_uuid("endpoint_id")
    changes = v.endpoint_patch(await c.body(), allow_insecure=c.settings.allow_private_targets)
    async with c.api.conn() as conn:
        row = await store.update_endpoint(conn, endpoint_id, c.scope, changes)
    return json_response(views.endpoint(row))


async def delete_endpoint(c: Ctx) -> web.Response:
    c.query()
    # 202 at once: the history goes in the background (hookstream.api.deletion)
    op = await request_deletion(c.api, c.scope, c.path_uuid("endpoint_id"))
    return json_response(views.operation(op), 202, f"/v1/operations/{op['id']}")


async def _transition(c: Ctx, action: str, **columns: Any) -> web.Response:
    endpoint_id = c.path_uuid("endpoint_id")
    async with c.api.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, c.scope, lock=True)
        status = rules.next_status(ep["status"], action)
        row = await store.set_endpoint_status(conn, endpoint_id, status, **columns)
    return json_response(views.endpoint(row))


async def pause_endpoint(c: Ctx) -> web.Response:
    c.query()
    until = v.pause(await c.body(required=False), now=now_utc())
    return await _transition(c, "pause", paused_until=until)


async def disable_endpoint(c: Ctx) -> web.Response:
    c.query()
    reason = v.disable(await c.body(required=False))
    return await _transition(c, "disable", disabled_reason=reason)


async def enable_endpoint(c: Ctx) -> web.Response:
    c.query()
    v.only(await c.body(required=False), ())
    return await _transition(c, "enable")


async def endpoint_health(c: Ctx) -> web.Response:
    q = c.query("window_s")
    raw = v.single(q, "window_s")
    window_s = DEFAULT_HEALTH_WINDOW_S if raw is None else v.integer_text(raw, "window_s",
                                                                          60, 7 * 86_400)
    now = now_utc()
    async with c.api.conn() as conn:
        ep = await store.get_endpoint(conn, c.path_uuid("endpoint_id"), c.scope)
        counts, last_error = await store.endpoint_health(
            conn, ep["id"], now - timedelta(seconds=window_s))
    return json_response(views.health(ep, counts, last_error, now=now, window_s=window_s))


# -- secrets -----------------------------------------------------------------------------
async def list_secrets(c: Ctx) -> web.Response:
    c.query()
    async with c.api.conn() as conn:
        ep = await store.get_endpoint(conn, c.path_uuid("endpoint_id"), c.scope)
        rows = await store.list_secrets(conn, ep["id"])
    return json_response({"data": [views.secret_info(r) for r in rows]})


async def rotate_secret(c: Ctx) -> web.Response:
    c.query()
    overlap_s = v.rotation(await c.body(required=False),
                           default_overlap_s=c.settings.secret_overlap_s)
    async with c.api.conn() as conn:
        ep = await store.get_endpoint(conn, c.path_uuid("endpoint_id"), c.scope, lock=True)
        row, secret = await store.rotate_secret(conn, ep["id"], overlap_s,
                                                c.settings.secret_keys)
        every = await store.list_secrets(conn, ep["id"])
    return json_response({"version": row["version"], "secret": secret, "overlap_s": overlap_s,
                          "secrets": [views.secret_info(r) for r in every]}, 201)


async def revoke_secret(c: Ctx) -> web.Response:
    c.query()
    version = v.secret_version(c.request.match_info["version"])
    async with c.api.conn() as conn:
        ep = await store.get_endpoint(conn, c.path_uuid("endpoint_id"), c.scope, lock=True)
        row = await store.revoke_secret(conn, ep["id"], version)
    return json_response(views.secret_info({**row, "active": False}))


# -- deliveries --------------------------------------------------------------------------
async def list_deliveries(c: Ctx) -> web.Response:
    q = c.query("tenant", "endpoint_id", "status", "since", "until", "cursor", "limit")
    endpoint_id = v.uuid_param(q, "endpoint_id")
    requested = v.tenant_param(q)
    if c.principal.operator and requested is None and endpoint_id is None:
        raise invalid("endpoint_id", "give endpoint_id or tenant when using an operator key")
    tenant = auth.listing_tenant(c.principal, requested)
    statuses = v.choices_param(q, "status", v.DELIVERY_STATUSES) or v.DELIVERY_STATUSES
    since = v.time_param(q, "since") or c.api.oldest()
    until = v.time_param(q, "until") or now_utc() + timedelta(days=1)
    limit = v.limit_param(q)
    async with c.api.conn() as conn:
        if endpoint_id is not None:  # another tenant's endpoint: 404, not an empty page
            await store.get_endpoint(conn, endpoint_id, tenant)
        rows = await store.list_deliveries(
            conn, tenant=tenant, endpoint_id=endpoint_id, statuses=statuses, since=since,
            until=until, before=v.cursor_param(q), limit=limit + 1)
    return page([views.delivery(r) for r in rows], rows, limit,
                lambda r: (r["created_at"], r["delivery_id"]))


async def get_delivery(c: Ctx) -> web.Response:
    c.query()
    async with c.api.conn() as conn:
        row = await store.get_delivery(conn, c.path_uuid("delivery_id"), c.scope)
        attempts = await store.delivery_attempts(conn, row["delivery_id"])
    return json_response({**views.delivery(row), "attempt_log": [views.attempt(a)
                                                                  for a in attempts]})


async def replay_delivery(c: Ctx) -> web.Response:
    c.query()
    v.only(await c.body(required=False), ())
    delivery_id = c.path_uuid("delivery_id")
    async with c.api.conn() as conn:
        row = await store.lock_delivery_for_replay(conn, delivery_id, c.scope)
        if (refusal := rules.replay_refusal(row["status"], row["endpoint_status"])) is not None:
            raise refusal
        marked = await store.mark_pending(conn, [delivery_id], v.REPLAYABLE)
        fresh = await store.get_delivery(conn, delivery_id, c.scope)
    # Committed: the task goes to Kafka outside any transaction (hookstream.api.tasks).
    c.api.metrics.replays.labels("single").inc(len(marked))
    queued = await c.api.sink.offer(replay_tasks(marked, now_utc()))
    response = json_response(views.delivery(fresh), 202, f"/v1/deliveries/{delivery_id}")
    # Who sends it: the task Kafka acknowledged, or (Kafka away) the dispatcher's sweeper.
    response.headers["Hookstream-Task"] = "acknowledged" if queued else "sweeper"
    return response


async def start_endpoint_operation(api: Api, scope: Any, endpoint_id: Any, kind: str,
                                   body: dict[str, Any], *, by_events: bool) -> dict[str, Any]:
    """A bulk replay or a recovery of one endpoint, recorded and started (the JSON API
    and the console share it): the endpoint locked, the range validated, a disabled
    endpoint re-enabled by a recovery, the operation row written; its work runs after."""
    now = now_utc()
    async with api.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, scope, lock=True)
        extra: dict[str, Any] = {}
        if kind == "replay":
            if (refusal := rules.replay_refusal("dead", ep["status"])) is not None:
                raise refusal
            replay = v.replay_range(body, now=now, oldest=api.oldest(),
                                    default_statuses=v.REPLAYABLE, allowed=v.REPLAYABLE,
                                    by_events=by_events)
        else:
            replay = v.replay_range(
                body, now=now, oldest=api.oldest(), default_statuses=v.RECOVERABLE,
                allowed=v.REPLAYABLE, since_required=False,
                default_since=ep["first_failure_at"] or now - RECOVER_LOOKBACK)
            extra["reenabled"] = ep["status"] != "active"
            if extra["reenabled"]:
                await store.set_endpoint_status(conn, endpoint_id, "active")
        op = await store.create_operation(
            conn, tenant=ep["tenant"], kind=kind, endpoint_id=endpoint_id, replay=replay,
            extra=extra, owner=api.operations.owner, lease_s=api.settings.operation_lease_s)
    api.operations.start(op["id"])
    return op


async def _start_operation(c: Ctx, kind: str) -> web.Response:
    c.query()
    body = await c.body(required=kind == "replay")
    op = await start_endpoint_operation(c.api, c.scope, c.path_uuid("endpoint_id"), kind,
                                        body, by_events=True)
    return json_response(views.operation(op), 202, f"/v1/operations/{op['id']}")


async def replay_endpoint(c: Ctx) -> web.Response:
    return await _start_operation(c, "replay")


async def recover_endpoint(c: Ctx) -> web.Response:
    return await _start_operation(c, "recover")


async def get_operation(c: Ctx) -> web.Response:
    c.query()
    async with c.api.conn() as conn:
        row = await store.get_operation(conn, c.path_uuid("operation_id"), c.scope)
    return json_response(views.operation(row))


# -- events ------------------------------------------------------------------------------
async def list_events(c: Ctx) -> web.Response:
    q = c.query("tenant", "endpoint_id", "type", "since", "until", "cursor", "limit")
    endpoint_id = v.uuid_param(q, "endpoint_id")
    patterns = v.type_patterns_param(q)
    requested = v.tenant_param(q)
    oldest = c.api.oldest()
    since = v.time_param(q, "since") or oldest
    if since < oldest:
        raise invalid("since", f"events are kept for {c.settings.history_days} days")
    until = v.time_param(q, "until") or now_utc() + timedelta(days=1)
    limit = v.limit_param(q)
    async with c.api.conn() as conn:
        if endpoint_id is not None:
            ep = await store.get_endpoint(conn, endpoint_id,
                                          auth.listing_tenant(c.principal, requested))
            tenant, patterns = ep["tenant"], patterns or ep["event_types"]
        else:
            tenant = auth.acting_tenant(c.principal, requested)
        rows = await store.list_events(conn, tenant=tenant, patterns=patterns, since=since,
                                       until=until, after=v.cursor_param(q), limit=limit + 1)
    return page([views.event(r) for r in rows], rows, limit,
                lambda r: (r["occurred_at"], r["event_id"]))


async def get_event(c: Ctx) -> web.Response:
    c.query()
    async with c.api.conn() as conn:
        row = await store.get_event(conn, c.path_uuid("event_id"), c.scope)
    return json_response(views.event(row))


# -- tenants and keys (operator) ---------------------------------------------------------
async def create_tenant(c: Ctx) -> web.Response:
    c.query()
    body = await c.body()
    v.only(body, ("id", "name"))
    if "id" not in body:
        raise invalid("id", "required")
    tenant = v.tenant_id(body["id"], "id")
    name = v.text(body.get("name", ""), "name", max_len=v.MAX_NAME)
    async with c.api.conn() as conn:
        row = await store.create_tenant(conn, tenant, name)
    return json_response(views.tenant(row), 201, f"/v1/tenants/{tenant}")


async def list_tenants(c: Ctx) -> web.Response:
    q = c.query("cursor", "limit")
    raw = v.single(q, "cursor")
    after = None if raw is None else v.tenant_id(raw, "cursor")
    limit = v.limit_param(q)
    async with c.api.conn() as conn:
        rows = await store.list_tenants(conn, after, limit + 1)
    more = len(rows) > limit
    return json_response({"data": [views.tenant(r) for r in rows[:limit]],
                          "next_cursor": rows[limit - 1]["id"] if more else None})


def _path_tenant(c: Ctx) -> str:
    return v.tenant_id(c.request.match_info["tenant"], "tenant")


async def create_tenant_key(c: Ctx) -> web.Response:
    c.query()
    body = await c.body(required=False)
    v.only(body, ("name",))
    name = v.text(body.get("name", ""), "name", max_len=v.MAX_NAME)
    tenant = _path_tenant(c)
    async with c.api.conn() as conn:
        await store.require_tenant(conn, tenant)
        row, token = await store.create_api_key(conn, tenant, name)
    return json_response({**views.api_key(row), "token": token}, 201)


async def list_tenant_keys(c: Ctx) -> web.Response:
    c.query()
    tenant = _path_tenant(c)
    async with c.api.conn() as conn:
        await store.require_tenant(conn, tenant)
        rows = await store.list_api_keys(conn, tenant)
    return json_response({"data": [views.api_key(r) for r in rows]})


async def revoke_key(c: Ctx) -> web.Response:
    c.query()
    async with c.api.conn() as conn:
        row = await store.revoke_api_key(conn, c.path_uuid("key_id"))
    return json_response(views.api_key(row))


# -- the OpenAPI document ----------------------------------------------------------------
@cache
def openapi_document() -> bytes:
    text = (resources.files("hookstream.api") / "openapi.yaml").read_text("utf-8")
    return orjson.dumps(yaml.safe_load(text))


def documented_responses() -> list[tuple[str, str, str]]:
    """(method, route, status) of every response in the OpenAPI document."""
    paths = orjson.loads(openapi_document())["paths"]
    return [(method.upper(), path, str(status)) for path, item in paths.items()
            for method, op in item.items() if method != "parameters"
            for status in op.get("responses", {})]


async def openapi(_request: web.Request) -> web.Response:
    return web.Response(body=openapi_document(), content_type="application/json")


# -- wiring ------------------------------------------------------------------------------
# (method, path, handler, operator only); the outbox and dead-letter routes live in
# their own modules.
ROUTES: tuple[Route, ...] = (
    ("GET", "/v1/me", whoami, False),
    ("POST", "/v1/endpoints", create_endpoint, False),
    ("GET", "/v1/endpoints", list_endpoints, False),
    ("POST", "/v1/endpoints/import", import_endpoints, False),
    ("GET", "/v1/endpoints/{endpoint_id}", get_endpoint, False),
    ("PATCH", "/v1/endpoints/{endpoint_id}", update_endpoint, False),
    ("DELETE", "/v1/endpoints/{endpoint_id}", delete_endpoint, False),
    ("POST", "/v1/endpoints/{endpoint_id}/pause", pause_endpoint, False),
    ("POST", "/v1/endpoints/{endpoint_id}/disable", disable_endpoint, False),
    ("POST", "/v1/endpoints/{endpoint_id}/enable", enable_endpoint, False),
    ("GET", "/v1/endpoints/{endpoint_id}/health", endpoint_health, False),
    ("GET", "/v1/endpoints/{endpoint_id}/secrets", list_secrets, False),
    ("POST", "/v1/endpoints/{endpoint_id}/secrets/rotate", rotate_secret, False),
    ("DELETE", "/v1/endpoints/{endpoint_id}/secrets/{version}", revoke_secret, False),
    ("POST", "/v1/endpoints/{endpoint_id}/replay", replay_endpoint, False),
    ("POST", "/v1/endpoints/{endpoint_id}/recover", recover_endpoint, False),
    ("GET", "/v1/deliveries", list_deliveries, False),
    ("GET", "/v1/deliveries/{delivery_id}", get_delivery, False),
    ("POST", "/v1/deliveries/{delivery_id}/replay", replay_delivery, False),
    ("GET", "/v1/operations/{operation_id}", get_operation, False),
    ("GET", "/v1/events", list_events, False),
    ("GET", "/v1/events/{event_id}", get_event, False),
    ("POST", "/v1/tenants", create_tenant, True),
    ("GET", "/v1/tenants", list_tenants, True),
    ("POST", "/v1/tenants/{tenant}/api-keys", create_tenant_key, True),
    ("GET", "/v1/tenants/{tenant}/api-keys", list_tenant_keys, True),
    ("DELETE", "/v1/api-keys/{key_id}", revoke_key, True),
    *outbox_routes.ROUTES,
    *dead_letter_routes.ROUTES,
)


def _route_label(request: web.Request) -> str:
    route = request.match_info.route
    resource = route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def errors_and_metrics(request: web.Request,
                             handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                             ) -> web.StreamResponse:
    try:
        with translating():  # driver errors arrive as hookstream.io.pg's
            response = await handler(request)
    except ApiError as exc:
        response = json_response(exc.body(), exc.status)
    except web.HTTPException as exc:  # no such route, wrong method, body too large
        code = {404: "not_found", 405: "method_not_allowed",
                413: "request_too_large"}.get(exc.status, "http_error")
        response = json_response({"error": {"code": code, "message": exc.reason}}, exc.status)
        if "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
    except (DatabaseUnavailable, BrokerUnavailable) as exc:
        log.warning("dependency unavailable", extra={"error": str(exc)})
        error = unavailable("a dependency (database or Kafka) is unavailable; retry later")
        response = json_response(error.body(), error.status)
    except DataRejected as exc:
        # Validation should have caught it; the database's own words stay in the log
        # (they may name tables), the caller learns it was the request's values.
        log.warning("request values refused by the database",
                    extra={"path": request.path, "error": str(exc)})
        error = ApiError(400, "invalid_request",
                         "a value in the request cannot be stored (e.g. a NUL character)")
        response = json_response(error.body(), error.status)
    except Exception:
        log.exception("unhandled API error", extra={"path": request.path})
        response = json_response(
            {"error": {"code": "internal", "message": "internal error"}}, 500)
    api = request.app.get(API)
    if api is not None:
        api.metrics.requests.labels(request.method, _route_label(request),
                                    str(response.status)).inc()
    return response


async def _resources(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    pool = AsyncConnectionPool(settings.database_url, min_size=1,
                               max_size=settings.db_pool_size, open=False,
                               connection_class=psycopg.AsyncConnection[DictRow],
                               kwargs={"row_factory": dict_row}, name="hookstream-api")
    await pool.open(wait=False)
    sink = TaskSink(settings.kafka_bootstrap, Topics(settings.topic_prefix))
    metrics = ApiMetrics(app[REGISTRY])
    operations = Operations(pool, sink, batch_size=settings.operation_batch_size,
                            lease_s=settings.operation_lease_s, replays=metrics.replays)
    app[API] = Api(settings, pool, sink, operations, metrics)
    sweeper = asyncio.create_task(operations.sweep_forever(settings.operation_lease_s),
                                  name="operation-sweeper")
    try:
        yield
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)
        await operations.close()
        await asyncio.to_thread(sink.close)
        await pool.close()


def build_app(settings: ApiSettings, registry: CollectorRegistry | None = None) -> web.Application:
    app = web.Application(middlewares=[errors_and_metrics], client_max_size=MAX_BODY_BYTES)
    app[SETTINGS] = settings
    app[REGISTRY] = registry if registry is not None else CollectorRegistry()
    app.cleanup_ctx.append(_resources)
    app.router.add_get("/openapi.json", openapi)
    for method, path, handler, operator in ROUTES:
        app.router.add_route(method, path, authed(handler, operator=operator))
    # The browser console and its JSON route (hookstream.api.console); imported here
    # because it builds on this module.
    from hookstream.api.console.mount import mount
    mount(app, settings)
    return app
