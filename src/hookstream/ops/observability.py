"""Logging setup and the small HTTP server every service runs for /metrics and /healthz."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest


def at_zero(counter: Counter, label_values: Iterable[str | tuple[str, ...]]) -> Counter:
    """Publish the series of each label value (a tuple for several labels) at 0 now.

    A labelled counter has no series until its first increment, so ``rate()`` misses
    that first event (the series appears at 1) and ``sum(rate(...))`` is no data rather
    than 0 until then: every value a counter can take is created with the counter."""
    for values in label_values:
        counter.labels(*((values,) if isinstance(values, str) else values))
    return counter


_STD_ATTRS = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def setup_logging(level: str, fmt: str, service: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


HealthCheck = Callable[[], tuple[bool, dict[str, Any]]]


class ServiceHTTP:
    """``/metrics`` (Prometheus text) and ``/healthz`` (200 or 503 with a JSON body)."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry, health: HealthCheck):
        registry_ref, health_ref = registry, health

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/metrics"):
                    body, ctype, code = generate_latest(registry_ref), CONTENT_TYPE_LATEST, 200
                elif self.path.startswith("/healthz"):
                    ok, detail = health_ref()
                    body = orjson.dumps({"ok": ok, **detail}, default=str)
                    ctype, code = "application/json", 200 if ok else 503
                else:
                    body, ctype, code = b"not found\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> ServiceHTTP:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
