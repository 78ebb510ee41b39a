"""What every JSON route handler works with: the request's context (who calls, the
control plane, the parsed body and query) and the JSON responses. Route modules share
it without importing each other or the app."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from hookstream.controlplane import auth
from hookstream.controlplane import validation as v
from hookstream.controlplane.context import ControlPlane
from hookstream.core.settings import ApiSettings


@dataclass(frozen=True)
class Ctx:
    request: web.Request
    cp: ControlPlane
    principal: auth.Principal

    @property
    def scope(self) -> str | None:
        return auth.tenant_scope(self.principal)

    @property
    def settings(self) -> ApiSettings:
        return self.cp.settings

    async def body(self, *, required: bool = True) -> dict[str, Any]:
        return v.json_object(await self.request.read(), required=required)

    def query(self, *allowed: str) -> Any:
        v.only_params(self.request.query, allowed)
        return self.request.query

    def path_uuid(self, name: str) -> uuid.UUID:
        return v.uuid_value(self.request.match_info[name], name)


Handler = Callable[[Ctx], Awaitable[web.Response]]


# -- responses ---------------------------------------------------------------------------
def json_response(data: Any, status: int = 200, location: str | None = None) -> web.Response:
    headers = {"Location": location} if location else None
    return web.Response(body=orjson.dumps(data), status=status, headers=headers,
                        content_type="application/json")


def page(items: list[dict[str, Any]], rows: list[dict[str, Any]], limit: int,
         key: Callable[[dict[str, Any]], tuple[Any, Any]]) -> web.Response:
    more = len(rows) > limit
    cursor = v.encode_cursor(*key(rows[limit - 1])) if more else None
    return json_response({"data": items[:limit], "next_cursor": cursor})


# (method, path, handler, operator only): the shape of every route table.
Route = tuple[str, str, Handler, bool]
