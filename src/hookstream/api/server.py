"""Serving the API from inside another service's process.

The fanout loop is synchronous (confluent-kafka consume, psycopg), so the API runs on
its own asyncio loop in a daemon thread; the two share nothing but the process. The
API is I/O bound (PostgreSQL, a Kafka flush per replay), so the GIL is not the limit.
A separate deployable would scale the control plane independently; it would be the
same ``build_app`` behind ``web.run_app`` — not needed at this size.

The control plane being down must not stop webhooks: if the API cannot start (port in
use, say) the fanout keeps running, logs the error, reports it in ``/healthz`` and
exports ``hookstream_api_up 0`` for alerting.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

from hookstream.api.app import build_app
from hookstream.core.settings import ApiSettings
from hookstream.ops.lag import LagSnapshot
from hookstream.ops.sampling import Sample
from hookstream.runner import Service, WatchesLag

log = logging.getLogger("hookstream.api")


class ApiServer:
    """The API app on its own event loop in a thread; ``port`` is known after start."""

    def __init__(self, settings: ApiSettings, registry: CollectorRegistry | None = None):
        self.settings = settings
        self.app = build_app(settings, registry)
        self.port = 0
        self.error: BaseException | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._run, name="api", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._start())
        except BaseException as exc:  # reported by start(); the thread just ends
            self.error = exc
            self._ready.set()
            self._loop.run_until_complete(self._cleanup())
            self._loop.close()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._cleanup())
        self._loop.close()

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.api_host, self.settings.api_port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _cleanup(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def start(self, timeout_s: float = 30.0) -> ApiServer:
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"API did not start within {timeout_s}s")
        if self.error is not None:
            raise self.error
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)

    @property
    def serving(self) -> bool:
        return self._thread.is_alive() and self._ready.is_set() and self.error is None

    def call(self, coro: Any, timeout_s: float = 60.0) -> Any:
        """Run a coroutine on the API's loop (tests, shutdown hooks) and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)


class WithApi:
    """A service plus the API thread: runs both, stops both, reports the API's state."""

    def __init__(self, service: Service, settings: ApiSettings, registry: CollectorRegistry):
        self.service = service
        self.settings = settings
        self.registry = registry
        self.api: ApiServer | None = None
        self._api_error: str | None = None
        self._up = Gauge("hookstream_api_up", "1 while the control-plane API is serving",
                         registry=registry)
        self._up.set_function(lambda: 1.0 if self.api is not None and self.api.serving else 0.0)

    @property
    def stop(self) -> threading.Event:
        return self.service.stop

    @property
    def healthy(self) -> bool:
        return self.service.healthy

    @property
    def last_error(self) -> str | None:
        if self.service.last_error is not None:
            return self.service.last_error
        if self.api is not None and not self.api.serving:
            return f"control-plane API not serving: {self._api_error or 'stopped'}"
        return None

    def watch_lag(self, latest: Callable[[], Sample[LagSnapshot] | None]) -> None:
        if isinstance(self.service, WatchesLag):
            self.service.watch_lag(latest)

    def run(self) -> None:
        self.api = ApiServer(self.settings, self.registry)
        try:
            self.api.start()
            log.info("control-plane API serving", extra={
                "api_host": self.settings.api_host, "api_port": self.api.port})
        except Exception as exc:
            self._api_error = f"{type(exc).__name__}: {exc}"
            log.error("control-plane API failed to start; the service keeps running",
                      extra={"error": self._api_error})
        try:
            self.service.run()
        finally:
            self.api.stop()


S = TypeVar("S")


def with_api(build: Callable[[S, CollectorRegistry], Service], settings: ApiSettings,
             ) -> Callable[[S, CollectorRegistry], Service]:
    """Wrap a service factory so the service also serves the API (when enabled)."""
    if not settings.api_enabled:
        return build
    return lambda s, registry: cast(Service, WithApi(build(s, registry), settings, registry))
