"""The endpoint circuit on the real stack: pause after N failures, probe, recover; disable
after failing continuously, telling the tenant through the pipeline itself."""

from __future__ import annotations

import time

import psycopg

from hookstream.dev.receiver import Behaviour, Receiver
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.helpers import query, scalar, service_metric, wait_until

CIRCUIT = {"circuit_failure_threshold": "3", "circuit_base_pause_s": "3",
           "circuit_max_pause_s": "6", "retry_base_s": "1", "retry_floor_s": "1",
           "retry_jitter": "0"}


def _pause_after_last_attempt(db_url: str) -> float:
    """How long the circuit pauses the endpoint, counted from the failed attempt that
    opened (or extended) it: the pause itself, whenever the test gets to look. (The
    dispatcher counts from its clock a moment after the attempt finished: never less,
    and more only by however long that moment took on a loaded machine.)"""
    return scalar(db_url, "SELECT extract(epoch FROM e.paused_until - a.last)::float8"
                          " FROM endpoints e, (SELECT max(finished_at) AS last FROM attempts) a")


def test_failures_pause_the_endpoint_then_a_probe_closes_it(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    p = start_pipeline(**CIRCUIT)
    ep = add_endpoint(db_url, receiver, "sick", "acme", behaviour=Behaviour(status=500))
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(3):
            write_event(conn, tenant="acme", type="a.b", payload={"i": i})
            time.sleep(0.2)  # three separate failures, not one burst
    wait_until(lambda: scalar(db_url, "SELECT paused_until IS NOT NULL FROM endpoints"), 30,
               message="circuit open")
    assert scalar(db_url, "SELECT consecutive_failures FROM endpoints") == 3
    assert 2.999 <= _pause_after_last_attempt(db_url) < 3.5
    seen = len(receiver.arrivals)
    # While paused nothing reaches the endpoint, though the three retries come due within
    # the pause (1 s after each failure): each one is turned away, deferred to the pause's
    # end, which the dispatcher counts. Only an open circuit defers for this reason.
    wait_until(lambda: service_metric(p["dispatcher"], "hookstream_dispatcher_deferred_total",
                                      reason="circuit") >= 3, 20,
               message="the retries turned away by the open circuit")
    assert len(receiver.arrivals) == seen
    # The pause ends; probes go one at a time; a failed probe doubles the pause (3 → 6 s).
    wait_until(lambda: scalar(db_url, "SELECT consecutive_failures FROM endpoints") >= 4, 20,
               message="a probe")
    assert 5.999 <= _pause_after_last_attempt(db_url) < 6.5
    # The endpoint heals: the next probe succeeds, the circuit closes, everything drains.
    receiver.behaviour["sick"].status = 200
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries WHERE status"
                                      " = 'delivered'") == 3, 30, message="recovered")
    (failures, paused, status), = query(
        db_url, "SELECT consecutive_failures, paused_until, status FROM endpoints")
    assert (failures, status) == (0, "active")
    assert paused is None
    assert scalar(db_url, "SELECT count(*) FROM endpoints WHERE id = %s", (ep,)) == 1


def test_an_endpoint_failing_for_long_is_disabled_and_its_tenant_told(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    start_pipeline(**CIRCUIT, disable_after_s="6", retry_window_s="600")
    add_endpoint(db_url, receiver, "dead-host", "acme", behaviour=Behaviour(status=502))
    add_endpoint(db_url, receiver, "ops-inbox", "acme", ["endpoint.*"])
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(3):
            write_event(conn, tenant="acme", type="a.b", payload={"i": i})
            time.sleep(0.2)
    wait_until(lambda: scalar(db_url, "SELECT status FROM endpoints WHERE url LIKE"
                                      " '%%dead-host'") == "disabled", 40, message="disabled")
    reason = scalar(db_url, "SELECT disabled_reason FROM endpoints WHERE url LIKE '%%dead-host'")
    assert "failing continuously since" in reason
    # The tenant learns through the pipeline: an endpoint.disabled event reaches its
    # other endpoint, signed like any webhook.
    wait_until(lambda: receiver.delivered_ids("ops-inbox"), 30, message="endpoint.disabled")
    body = next(a.body for a in receiver.arrivals if a.name == "ops-inbox")
    assert b"dead-host" in body and b"failing continuously" in body
    # Its deliveries are kept (not dropped, not dead) for a replay after re-enabling.
    statuses = {r[0] for r in query(db_url, "SELECT d.status FROM deliveries d JOIN endpoints e"
                                            " ON e.id = d.endpoint_id WHERE e.url LIKE"
                                            " '%%dead-host'")}
    assert statuses <= {"pending", "in_flight"}


def test_a_paused_endpoint_gets_rows_that_wait_then_go_out_when_resumed(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    p = start_pipeline(endpoint_refresh_s="1", sweep_interval_s="1")
    ep = add_endpoint(db_url, receiver, "on-hold", "acme")
    # Paused before any of its tasks exists: the dispatcher reads the row (paused) when
    # it meets the endpoint's first task.
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE endpoints SET status = 'paused' WHERE id = %s", (ep,))
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(5):
            write_event(conn, tenant="acme", type="a.b", payload={"i": i})
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries") == 5, 30,
               message="rows for a paused endpoint")
    # Each task is met and held (dropped from memory, the row stays pending): five held
    # tasks mean the dispatcher has looked at every one and sent none.
    wait_until(lambda: service_metric(p["dispatcher"], "hookstream_dispatcher_tasks_dropped_total",
                                      reason="paused") >= 5, 30,
               message="every task held while paused")
    assert receiver.arrivals == []
    assert scalar(db_url, "SELECT count(*) FROM deliveries WHERE status = 'pending'") == 5
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE endpoints SET status = 'active' WHERE id = %s", (ep,))
    wait_until(lambda: len(receiver.delivered_ids("on-hold")) == 5, 30, message="resumed")
