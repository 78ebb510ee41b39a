"""The JSON API's routes, one module per resource; ``ROUTES`` is the whole table
(method, path, handler, operator only), which ``openapi.yaml`` describes (a unit test
keeps the two in step). Each handler parses the request, calls a use case of
``hookstream.controlplane`` and shapes the answer (``views``)."""

from __future__ import annotations

from hookstream.api.handling import Route
from hookstream.api.routes import (
    dead_letters,
    deliveries,
    endpoints,
    events,
    operations,
    outbox,
    tenants,
)

ROUTES: tuple[Route, ...] = (
    tenants.ROUTES[0],  # GET /v1/me
    *endpoints.ROUTES,
    *operations.ROUTES,
    *deliveries.ROUTES,
    *events.ROUTES,
    *tenants.ROUTES[1:],
    *outbox.ROUTES,
    *dead_letters.ROUTES,
)
