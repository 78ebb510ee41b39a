"""The harness picks a free HTTP port for each service, but cannot reserve it: beside the
parallel suite another process may take it before the service binds it. The service then
exits 2 ("Address already in use"), and whatever took the port may well answer
``/healthz`` with 200 — another test's service. The harness must not take that answer for
its own service's: it checks that the answer comes from its process and starts it again on
another port. (CI once lost a fanout this way: healthy by a neighbour's answer, gone.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hookstream.core.topics import Topics
from hookstream.dev.harness import ServiceProcess, pipeline_env
from tests.conftest import Stack
from tests.helpers import stop_cleanly


class _Neighbour(BaseHTTPRequestHandler):
    """Another test's relay: healthy, on the port our relay was given."""

    def do_GET(self) -> None:
        body = json.dumps({"ok": True, "service": "relay", "last_error": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def neighbour() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Neighbour)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_a_neighbours_health_answer_on_a_taken_port_is_not_taken_for_the_service(
        stack: Stack, db_url: str, topics: Topics, log_dir: Path, neighbour: int) -> None:
    env = pipeline_env(database_url=db_url, bootstrap=stack.bootstrap,
                       topic_prefix=topics.prefix)
    relay = ServiceProcess("relay", env, log_dir / "relay.log", http_port=neighbour).start()
    try:
        relay.wait_healthy()
        # it moved to a port of its own, and what answers there is this very process
        assert relay.http_port != neighbour
        assert relay.running()
        code, body = relay.get("/healthz")
        assert code == 200 and json.loads(body)["pid"] == relay.proc.pid  # type: ignore[union-attr]
        assert "Address already in use" in relay.log_path.read_text()
    finally:
        stop_cleanly(relay)
