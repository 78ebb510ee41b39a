"""The operator's and the tenant's commands. ``bootstrap``: tenants and API keys, straight
to PostgreSQL through the control plane's use cases (the first key cannot need a key).
The rest, registered by ``register``: daily work as clients of the control-plane API
(``HOOKSTREAM_API_URL``, ``HOOKSTREAM_API_KEY``), one command per API operation."""

from __future__ import annotations

from typing import Any

from hookstream.cli.commands import deliveries, endpoints, operations, outbox, whoami


def register(sub: Any) -> None:
    whoami.register(sub)
    endpoints.register(sub)
    deliveries.register(sub)
    operations.register(sub)
    outbox.register(sub)
