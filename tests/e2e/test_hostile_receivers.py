"""Hostile receivers on the real stack: whatever bytes an endpoint answers with, the
worst it can do is fail its own deliveries. Every attempt is recorded (no batch is
blocked by one unstorable row), healthy tenants keep being served meanwhile, and every
request a receiver got is explained by an attempt row (no lease expiry re-sends)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from hookstream.dev.receiver import Receiver
from hookstream.endpoints import create_endpoint
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.helpers import query, scalar, wait_until
from tests.hostile import BEHAVIOURS, HostileServer

EVENTS = 3


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    server = HostileServer().start()
    yield server
    server.stop()


def test_any_bytes_a_receiver_sends_end_as_a_recorded_attempt(
        db_url: str, receiver: Receiver, hostile: HostileServer,
        start_pipeline: StartPipeline) -> None:
    start_pipeline(max_attempts="2", retry_base_s="1", retry_floor_s="1", retry_jitter="0",
                   circuit_failure_threshold="1000", lease_s="15")
    endpoints = {}
    with psycopg.connect(db_url) as conn:
        for name in BEHAVIOURS:
            ep = create_endpoint(conn, tenant="mallory", url=hostile.url(name),
                                 event_types=["*"], allow_insecure=True)
            endpoints[name] = str(ep.endpoint_id)
    add_endpoint(db_url, receiver, "healthy", "acme")
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(EVENTS):
            write_event(conn, tenant="mallory", type="a.b", payload={"i": i})
        for i in range(20):
            write_event(conn, tenant="acme", type="a.b", payload={"i": i})
    # The healthy tenant is served whatever the hostile endpoints do.
    wait_until(lambda: len(receiver.delivered_ids("healthy")) == 20, 30,
               message="healthy deliveries")
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries WHERE status = 'delivered'"
                                      " AND endpoint_id = (SELECT id FROM endpoints WHERE"
                                      " tenant = 'acme')") == 20, 30,
               message="healthy outcomes recorded")
    # Every hostile delivery ends: delivered (a 2xx whatever the body) or dead (after its
    # attempts), never stuck in flight.
    total = EVENTS * len(BEHAVIOURS)
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries d JOIN endpoints e ON"
                                      " e.id = d.endpoint_id WHERE e.tenant = 'mallory' AND"
                                      " d.status IN ('delivered', 'dead')") == total, 60,
               message="every hostile delivery delivered or dead")
    assert scalar(db_url, "SELECT count(*) FROM attempts WHERE outcome = 'in_flight'") == 0
    by_endpoint = dict(query(db_url, "SELECT endpoint_id::text, array_agg(DISTINCT status)"
                                     " FROM deliveries GROUP BY 1"))
    assert by_endpoint[endpoints["nul"]] == ["delivered"]
    assert by_endpoint[endpoints["utf8"]] == ["delivered"]
    assert by_endpoint[endpoints["huge"]] == ["delivered"]
    assert by_endpoint[endpoints["gzipbomb"]] == ["delivered"]
    for name in ("http09", "garbagestatus", "header64k", "nulheader"):
        assert by_endpoint[endpoints[name]] == ["dead"], name
    excerpt = scalar(db_url, "SELECT a.response_excerpt FROM attempts a JOIN deliveries d USING"
                             " (delivery_id) WHERE d.endpoint_id = %s LIMIT 1",
                     (endpoints["nul"],))
    assert excerpt.startswith("accepted") and "\x00" not in excerpt
    # Each request a hostile endpoint read is one attempt row: nothing was sent twice
    # behind the records' back.
    attempts = dict(query(db_url, "SELECT d.endpoint_id::text, count(*) FROM attempts a JOIN"
                                  " deliveries d USING (delivery_id) GROUP BY 1"))
    for name, endpoint_id in endpoints.items():
        assert hostile.requests[name] == attempts[endpoint_id], name
