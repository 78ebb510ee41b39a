"""The control plane an app serves: opened when the app starts, closed when it stops
(``open_control_plane``, an aiohttp cleanup context), found by handlers through the
app's keys. Route modules and the console read it here, never from the module that
builds the app."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CollectorRegistry

from hookstream.api.openapi import documented_responses
from hookstream.controlplane.context import ApiMetrics, ControlPlane, running
from hookstream.core.settings import ApiSettings

API = web.AppKey("hookstream_api", ControlPlane)
SETTINGS = web.AppKey("hookstream_api_settings", ApiSettings)
REGISTRY = web.AppKey("hookstream_api_registry", CollectorRegistry)


async def open_control_plane(app: web.Application) -> AsyncIterator[None]:
    metrics = ApiMetrics(app[REGISTRY], documented_responses())
    async with running(app[SETTINGS], metrics) as cp:
        app[API] = cp
        yield


def control_plane(request: web.Request) -> ControlPlane:
    return request.config_dict[API]
