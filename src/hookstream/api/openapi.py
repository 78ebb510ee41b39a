"""The OpenAPI document beside this package (``openapi.yaml``), served as
``/openapi.json``; the responses it promises label the request metric."""

from __future__ import annotations

from functools import cache
from importlib import resources

import orjson
import yaml
from aiohttp import web


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
