"""Bulk operations: ``POST /v1/endpoints/{id}/replay | recover`` start one (202), and
``/v1/operations/{id}`` shows its progress."""

from __future__ import annotations

from aiohttp import web

from hookstream.api.handling import Ctx, Route, json_response
from hookstream.controlplane import replay, views


async def _start_operation(c: Ctx, kind: str) -> web.Response:
    c.query()
    body = await c.body(required=kind == "replay")
    op = await replay.start_endpoint_operation(c.cp, c.scope, c.path_uuid("endpoint_id"),
                                               kind, body, by_events=True)
    return json_response(views.operation(op), 202, f"/v1/operations/{op['id']}")


async def replay_endpoint(c: Ctx) -> web.Response:
    return await _start_operation(c, "replay")


async def recover_endpoint(c: Ctx) -> web.Response:
    return await _start_operation(c, "recover")


async def get_operation(c: Ctx) -> web.Response:
    c.query()
    row = await replay.get_operation(c.cp, c.path_uuid("operation_id"), c.scope)
    return json_response(views.operation(row))


ROUTES: tuple[Route, ...] = (
    ("POST", "/v1/endpoints/{endpoint_id}/replay", replay_endpoint, False),
    ("POST", "/v1/endpoints/{endpoint_id}/recover", recover_endpoint, False),
    ("GET", "/v1/operations/{operation_id}", get_operation, False),
)
