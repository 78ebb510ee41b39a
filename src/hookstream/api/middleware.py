"""Every JSON response passes here: a raised refusal or failure becomes its JSON error
body (``problems``), and each answer is counted by method, route and status."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from hookstream.api.handling import json_response
from hookstream.api.problems import problem_of
from hookstream.api.resources import API
from hookstream.io.pg import translating

log = logging.getLogger("hookstream.api")


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
    except Exception as exc:
        problem = problem_of(exc, request, log)
        response = json_response(problem.body(), problem.status)
        response.headers.update(problem.headers)
    cp = request.app.get(API)
    if cp is not None:
        cp.metrics.requests.labels(request.method, _route_label(request),
                                   str(response.status)).inc()
    return response
