"""The OpenAPI document and the app agree: every route is documented, nothing documented
is missing, every $ref resolves."""

from __future__ import annotations

from typing import Any

import orjson

from hookstream.api.app import build_app
from hookstream.api.console.mount import JSON_ROUTES
from hookstream.api.openapi import openapi_document
from hookstream.api.routes import ROUTES
from hookstream.core.settings import ApiSettings


def document() -> dict[str, Any]:
    return orjson.loads(openapi_document())  # type: ignore[no-any-return]


def test_the_document_is_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1") and doc["info"]["title"]


def test_every_route_is_documented_and_every_documented_route_exists() -> None:
    documented = {(method.upper(), path) for path, item in document()["paths"].items()
                  for method in item if method != "parameters"}
    served = {(m, p) for m, p, _, _ in (*ROUTES, *JSON_ROUTES)} | {("GET", "/openapi.json")}
    assert documented == served


def test_the_app_registers_exactly_the_route_table() -> None:
    app = build_app(ApiSettings())
    # the browser console's pages (HTML, not in the document) live under /console, and
    # "/" leads to them
    registered = {(r.method, r.resource.canonical) for r in app.router.routes()
                  if r.resource is not None and r.method != "HEAD"
                  and not r.resource.canonical.startswith("/console")
                  and r.resource.canonical != "/"}
    assert registered == {(m, p) for m, p, _, _ in (*ROUTES, *JSON_ROUTES)} | {
        ("GET", "/openapi.json")}


def test_every_ref_resolves() -> None:
    doc = document()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref is not None:
                target: Any = doc
                for part in ref.removeprefix("#/").split("/"):
                    target = target[part]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)


def test_path_parameters_are_declared() -> None:
    doc = document()
    for path, item in doc["paths"].items():
        names = {seg[1:-1] for seg in path.split("/") if seg.startswith("{")}
        for method, op in item.items():
            if method == "parameters":
                continue
            declared = set()
            for p in [*item.get("parameters", []), *op.get("parameters", [])]:
                if "$ref" in p:
                    p = doc["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]
                if p["in"] == "path":
                    declared.add(p["name"])
            assert declared == names, (path, method)


def test_without_the_console_there_is_no_console_route() -> None:
    app = build_app(ApiSettings(console_enabled=False))
    paths = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert not any(p.startswith("/console") or p == "/v1/portal-sessions" for p in paths)
