"""PostgreSQL unreachable from the dispatcher by dropped packets, for two minutes, under
load (issue #47): no reset and no refusal, the way a firewall or a partition fails.

The dispatcher reaches PostgreSQL through a port of its own (a TCP relay in the test),
and netfilter drops every packet of that port. No call may hang past its bound: its
``/healthz`` turns red within 30 s and it keeps running; once the packets flow again,
first attempts resume within 30 s; nothing is lost and every request a receiver saw is
explained by an attempt row.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from hookstream.dev.receiver import Receiver
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.hanging import Proxy, dropped
from tests.helpers import query, scalar, stop_cleanly, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

ENDPOINTS = 5
EVENTS_PER_S = 10  # × 5 endpoints: 50 deliveries/s
CUT_S = 120.0
BOUND_S = 30.0


def _via(db_url: str, port: int) -> str:
    parts = urlsplit(db_url)
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def test_the_database_blackholed_from_the_dispatcher_for_two_minutes(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    for i in range(ENDPOINTS):
        add_endpoint(db_url, receiver, f"e{i}", "acme")
    proxy = Proxy(urlsplit(db_url).port or 5432)
    p = None
    try:
        p = start_pipeline()
        dispatcher = p["dispatcher"]
        dispatcher.terminate()
        dispatcher.env["HOOKSTREAM_DATABASE_URL"] = _via(db_url, proxy.port)
        dispatcher.start().wait_healthy()
        written, halt = [0], threading.Event()

        def write() -> None:
            with psycopg.connect(db_url, autocommit=True) as conn:
                while not halt.wait(1.0 / EVENTS_PER_S):
                    write_event(conn, tenant="acme", type="a.b", payload={"n": written[0]})
                    written[0] += 1

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        try:
            wait_until(lambda: len(receiver.arrivals) >= 200, 60, 0.5,
                       message="work under way")
            with dropped(proxy.port):
                cut = time.monotonic()
                wait_until(lambda: dispatcher.get("/healthz")[0] != 200, BOUND_S, 0.5,
                           message="the dispatcher's /healthz red while PostgreSQL is away")
                red_after = time.monotonic() - cut
                time.sleep(max(0.0, CUT_S - (time.monotonic() - cut)))  # the outage itself
                assert dispatcher.proc is not None and dispatcher.proc.poll() is None
                before = len(receiver.arrivals)
            back = time.monotonic()
            wait_until(lambda: len(receiver.arrivals) > before, BOUND_S, 0.2,
                       message="attempts resumed after the network's return")
            resumed_after = time.monotonic() - back
            wait_until(lambda: dispatcher.get("/healthz")[0] == 200, BOUND_S, 0.5,
                       message="the dispatcher's /healthz green again")
        finally:
            halt.set()
            writer.join(10)
        total = written[0] * ENDPOINTS
        wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries"
                                          " WHERE status = 'delivered'") == total, 120, 1.0,
                   message=f"all {total} deliveries delivered")
        stop_cleanly(*p.processes.values())  # while its way to the database still exists
    finally:
        if p is not None:
            p["dispatcher"].terminate()
        proxy.stop()
    seen = Counter(a.webhook_id for a in receiver.arrivals)
    attempts = dict(query(db_url, "SELECT delivery_id::text, count(*) FROM attempts"
                                  " GROUP BY delivery_id"))
    assert len(seen) == total
    assert all(attempts.get(k, 0) >= n for k, n in seen.items())
    print(f"healthz red after {red_after:.1f} s; attempts resumed {resumed_after:.1f} s"
          " after the network's return")
