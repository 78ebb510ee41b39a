"""The shared entry point of the three services: settings, logging, /metrics, signals."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry

from hookstream.observability import ServiceHTTP, setup_logging
from hookstream.settings import CommonSettings, SettingsError, from_env


class Service(Protocol):
    stop: threading.Event
    healthy: bool
    last_error: str | None

    def run(self) -> None: ...


S = TypeVar("S", bound=CommonSettings)


def run_service(
    name: str,
    settings_cls: type[S],
    build: Callable[[S, CollectorRegistry], Service],
    http_port: Callable[[S], int],
) -> int:
    try:
        settings = from_env(settings_cls)
    except SettingsError as exc:
        print(f"hookstream {name}: configuration error: {exc}", flush=True)
        return 2
    setup_logging(settings.log_level, settings.log_format, name)
    log = logging.getLogger(f"hookstream.{name}")
    registry = CollectorRegistry()
    service = build(settings, registry)
    http = ServiceHTTP(
        settings.http_host, http_port(settings), registry,
        lambda: (service.healthy, {"service": name, "last_error": service.last_error}),
    ).start()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stopping", extra={"signal": signum})
        service.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info(f"{name} started", extra={"http_port": http.port})
    try:
        service.run()
    finally:
        http.stop()
    log.info(f"{name} stopped")
    return 0
