"""SSRF at connect time, through the shipped dispatcher as a process with private targets
forbidden (the production setting; every other e2e test allows them for its loopback
receiver). A URL with a public-looking host name passes registration; later the name
resolves to 127.0.0.1 (DNS rebinding, played by tests/e2e/fakedns). The dispatcher must
refuse at connect time, and never reach what listens there. And proxy variables in its
environment must not route requests around that check: the dispatcher ignores them."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from hookstream.dev.receiver import Receiver
from hookstream.endpoints import create_endpoint
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.helpers import query, scalar, wait_until

REBOUND = "hooks.rebind-attack.example"  # registered as public; resolves to loopback
FAKE_DNS = Path(__file__).parent / "fakedns"


class Listener:
    """A loopback TCP port that counts the connections it accepts and closes each at
    once: whatever the protocol, a request that got here shows up as a connection."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.port: int = self._sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


@pytest.fixture
def listener() -> Iterator[Callable[[], Listener]]:
    made: list[Listener] = []

    def make() -> Listener:
        made.append(Listener())
        return made[-1]

    yield make
    for item in made:
        item.close()


def _rebinding_dns(address: str = "127.0.0.1") -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(FAKE_DNS), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, "HOOKSTREAM_TEST_DNS": f"{REBOUND}={address}"}


def _rebound_endpoint(db_url: str, port: int) -> str:
    # Registration's own rules (no allow_insecure): an https URL with a public-looking
    # name passes; only connect time can tell where it leads.
    with psycopg.connect(db_url) as conn:
        ep = create_endpoint(conn, tenant="acme", url=f"https://{REBOUND}:{port}/x")
    return str(ep.endpoint_id)


def _finished_attempts(db_url: str, endpoint_id: str) -> list[tuple[str | None, str | None]]:
    return query(db_url, "SELECT a.error_class, d.last_error FROM attempts a"
                         " JOIN deliveries d USING (delivery_id)"
                         " WHERE d.endpoint_id = %s AND a.finished_at IS NOT NULL",
                 (endpoint_id,))


def test_a_name_resolving_to_loopback_is_refused_at_connect_time(
        db_url: str, start_pipeline: StartPipeline, listener: Callable[[], Listener]) -> None:
    target = listener()
    start_pipeline(allow_private_targets="false", env=_rebinding_dns())
    ep = _rebound_endpoint(db_url, target.port)
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(3):
            write_event(conn, tenant="acme", type="invoice.paid", payload={"i": i})
    wait_until(lambda: len(_finished_attempts(db_url, ep)) >= 3, 60,
               message="the attempts of the rebound endpoint")
    attempts = _finished_attempts(db_url, ep)
    assert {error_class for error_class, _ in attempts} == {"blocked_address"}
    # Refused by the connect-time resolver for the address the name led to, not by the
    # URL rules (which passed it at registration).
    assert all(f"{REBOUND} is forbidden: 127.0.0.1 (loopback)" in (error or "")
               for _, error in attempts), attempts
    assert target.connections == 0
    assert scalar(db_url, "SELECT count(*) FROM deliveries WHERE status = 'delivered'") == 0


def test_the_same_name_reaches_the_listener_when_private_targets_are_allowed(
        db_url: str, start_pipeline: StartPipeline, listener: Callable[[], Listener]) -> None:
    # The control: the test's DNS really leads to the listener, so the refusal above is
    # the guard's doing, not a name that failed to resolve.
    target = listener()
    start_pipeline(allow_private_targets="true", env=_rebinding_dns())
    ep = _rebound_endpoint(db_url, target.port)
    with psycopg.connect(db_url) as conn:
        write_event(conn, tenant="acme", type="invoice.paid", payload={})
    wait_until(lambda: _finished_attempts(db_url, ep), 60, message="an attempt")
    assert target.connections >= 1
    ((error_class, _),) = _finished_attempts(db_url, ep)
    assert error_class != "blocked_address"


def test_proxy_variables_in_the_environment_are_ignored(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline,
        listener: Callable[[], Listener]) -> None:
    # A proxy would make the connection to the target (the resolver would only see the
    # proxy's address), so the dispatcher must connect directly, whatever its environment.
    proxy, https_target = listener(), listener()
    url = f"http://127.0.0.1:{proxy.port}"
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                  "http_proxy", "https_proxy", "all_proxy")}
    env |= {"NO_PROXY": "", "no_proxy": ""}
    start_pipeline(env={**env, **_rebinding_dns()})
    plain = add_endpoint(db_url, receiver, "plain", "acme")  # http://127.0.0.1:...
    tls = _rebound_endpoint(db_url, https_target.port)  # https://, via the test's DNS
    with psycopg.connect(db_url) as conn:
        write_event(conn, tenant="acme", type="invoice.paid", payload={})
    wait_until(lambda: _finished_attempts(db_url, plain) and _finished_attempts(db_url, tls),
               60, message="both endpoints attempted")
    assert proxy.connections == 0
    # The http request was delivered straight to the receiver, the https one went
    # straight to its own listener (which closed it: no TLS there).
    assert scalar(db_url, "SELECT status FROM deliveries WHERE endpoint_id = %s",
                  (plain,)) == "delivered"
    assert len(receiver.arrivals) == 1 and receiver.arrivals[0].verified
    assert https_target.connections >= 1
