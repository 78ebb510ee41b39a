"""Held work is released and lost work is swept, on the real stack.

* A paused or disabled endpoint holds its deliveries (pending, visible); when it is
  active again, however that happens (API, CLI, plain UPDATE), the sweeper sends them at
  once, each once.
* A pending delivery whose task is gone (however that happened) is re-queued by the
  sweeper once it is overdue by the bound.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from hookstream.dev.harness import ServiceProcess
from hookstream.dev.receiver import Receiver
from hookstream.endpoints import create_endpoint
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.helpers import scalar, service_metric, wait_until

SWEEP = {"sweep_interval_s": "1", "endpoint_refresh_s": "1"}


def _events(db_url: str, n: int, tag: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(n):
            write_event(conn, tenant="acme", type="a.b", payload={tag: i})


def _dropped(dispatcher: ServiceProcess) -> float:
    return service_metric(dispatcher, "hookstream_dispatcher_tasks_dropped_total",
                          reason="paused")


@pytest.mark.parametrize("held", ["paused", "disabled"])
def test_held_deliveries_are_sent_once_the_endpoint_is_active_again(
        held: str, db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    p = start_pipeline(**SWEEP)
    ep = add_endpoint(db_url, receiver, "held", "acme")
    _events(db_url, 3, "before")
    wait_until(lambda: len(receiver.delivered_ids("held")) == 3, 30, message="served before")
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE endpoints SET status = 'paused' WHERE id = %s", (ep,))
    # Events keep coming while it is held: rows are created, nothing is sent. The
    # dispatcher learns of the pause on its next endpoint refresh, so the first of them
    # may still be sent: events are written until it drops one, then five more.
    during = 0
    deadline = time.monotonic() + 30
    while _dropped(p["dispatcher"]) < 1:
        assert time.monotonic() < deadline, "the dispatcher never held the paused endpoint"
        _events(db_url, 1, "during")
        during += 1
        wait_until(lambda n=during: len(receiver.delivered_ids("held"))  # type: ignore[misc]
                   + _dropped(p["dispatcher"]) >= 3 + n, 30, message="the event sent or held")
    _events(db_url, 5, "during")
    during += 5
    wait_until(lambda: len(receiver.delivered_ids("held")) + _dropped(p["dispatcher"])
               == 3 + during, 30, message="every event sent or held")
    sent_before = len(receiver.delivered_ids("held"))
    held_rows = 3 + during - sent_before
    assert held_rows >= 6
    assert scalar(db_url, "SELECT count(*) FROM deliveries d WHERE d.status = 'pending'"
                          " AND NOT EXISTS (SELECT 1 FROM attempts a"
                          " WHERE a.delivery_id = d.delivery_id)") == held_rows
    if held == "disabled":
        # Disabling keeps the deliveries it has (held); events after it are not fanned
        # out to it at all (a disabled endpoint is not subscribed: `recover` replays).
        with psycopg.connect(db_url) as conn:
            conn.execute("UPDATE endpoints SET status = 'disabled' WHERE id = %s", (ep,))
        _events(db_url, 5, "while-disabled")
        wait_until(lambda: scalar(db_url, "SELECT count(*) FROM outbox WHERE published_at IS"
                                          " NULL") == 0, 30, message="published")
        wait_until(lambda: scalar(db_url, "SELECT count(*) FROM events") == 3 + during + 5,
                   30, message="fanned out")
        assert scalar(db_url, "SELECT count(*) FROM deliveries") == 3 + during
    assert len(receiver.arrivals) == sent_before
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE endpoints SET status = 'active' WHERE id = %s", (ep,))
    released = time.monotonic()
    wait_until(lambda: len(receiver.delivered_ids("held")) == 3 + during, 30, interval_s=0.2,
               message="held work sent after the endpoint is active")
    # Within seconds (the sweep interval is 1 s; generous on two shared cores), not after
    # the 120 s sweep bound.
    assert time.monotonic() - released < 20
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries WHERE status ="
                                      " 'delivered'") == 3 + during, 30, message="recorded")
    webhook_ids = [a.webhook_id for a in receiver.arrivals]
    assert len(webhook_ids) == len(set(webhook_ids)) == 3 + during


def test_a_pending_delivery_without_a_task_is_swept(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    p = start_pipeline(**SWEEP, sweep_after_s="3")
    add_endpoint(db_url, receiver, "first", "acme")
    _events(db_url, 1, "x")
    wait_until(lambda: receiver.delivered_ids("first"), 30, message="first delivery")
    # A second endpoint registered after the event: a delivery row for it is made by hand,
    # with no task anywhere (what a lost produce or a lost record leaves behind).
    with psycopg.connect(db_url) as conn:
        ep = create_endpoint(conn, tenant="acme", url=receiver.url("orphan"),
                             event_types=["*"], allow_insecure=True)
        receiver.add("orphan", ep.secret)
        conn.execute("""INSERT INTO deliveries (event_id, endpoint_id, tenant,
                        endpoint_config_version, expires_at, committed_at)
                        SELECT event_id, %s, tenant, 1, now() + interval '1 day', committed_at
                        FROM events""",
                     (ep.endpoint_id,))
    wait_until(lambda: receiver.delivered_ids("orphan"), 30, message="swept delivery sent")
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries WHERE status ="
                                      " 'delivered'") == 2, 30, message="recorded")
    code, body = p["dispatcher"].get("/metrics")
    assert code == 200 and b'hookstream_dispatcher_swept_total{reason="lost"} 1.0' in body
