"""A dispatcher SIGKILLed twice under load parks no healthy endpoint (issue #47).

Seen in production-like runs: within seconds of each restart a fresh dispatcher — no
latency or drain observations yet, its partitions' backlog arriving at once — parked the
backlog of healthy endpoints minutes ahead and logged ``endpoint deferred without being
served`` for them; they then got no request for 110 s while their work waited.

Here 20 healthy endpoints (one per tenant, 15 events/s each: ~300 events/s and as many
deliveries) take the load; the dispatcher is SIGKILLed twice with a backlog building in
its partitions while it is away, the second time while every receiver hangs for 16 s
(so the fresh process starts from timeouts and open circuits). Every delivery must be
delivered within two minutes of the last fault, and no endpoint may be reported as
deferred without being served.

On the main of 2026-12-07 this failed: 60 deliveries (3 per endpoint) stayed pending with
no task, 97 s overdue when the two minutes ran out — the reaper's tasks for the killed
process's leases, produced before their rows were released, met the open circuits,
parked nothing and were dropped as stale (the sweeper would have found them only after
its 120 s bound).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import psycopg
import pytest

from hookstream.dev.receiver import Behaviour, Receiver
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.helpers import query, scalar, service_metric, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

TENANTS = 20
EVENTS_PER_TENANT_S = 15.0
ANSWER = Behaviour(delay_s=0.15)  # healthy: 4 connections drain ~26/s, beyond the load
DOWN_S = 8.0  # each kill leaves ~120 tasks per endpoint waiting in the partitions
AFTER_FAULT_S = 120.0
HUNG = Behaviour(delay_s=30.0)  # past the 5 s deadline: every attempt times out
HANG_S = 16.0
ROUND_S = 0.2  # the bound: delivered within two minutes of the last fault


class Writer(threading.Thread):
    def __init__(self, db_url: str):
        super().__init__(daemon=True)
        self.db_url, self.written, self.halt = db_url, 0, threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.db_url) as conn:
                next_at = time.monotonic()
                while not self.halt.is_set():
                    # a fifth of a second's worth per transaction
                    with conn.transaction():
                        for t in range(TENANTS):
                            for _ in range(round(EVENTS_PER_TENANT_S * ROUND_S)):
                                write_event(conn, tenant=f"t{t:02d}", type="order.paid",
                                            payload={"n": self.written})
                                self.written += 1
                    next_at += ROUND_S
                    self.halt.wait(max(0.0, next_at - time.monotonic()))
        except BaseException as exc:  # seen by the test, not lost in a thread
            self.error = exc


def _assert_every_arrival_explained(db_url: str, receiver: Receiver, total: int) -> None:
    """Every delivery arrived, and every request a receiver saw has its attempt row."""
    seen = Counter(a.webhook_id for a in receiver.arrivals)
    attempts = dict(query(db_url, "SELECT delivery_id::text, count(*) FROM attempts"
                                  " GROUP BY delivery_id"))
    assert len(seen) == total
    unexplained = {k: (n, attempts.get(k, 0)) for k, n in seen.items()
                   if attempts.get(k, 0) < n}
    assert not unexplained, list(unexplained.items())[:10]


def _not_delivered(db_url: str) -> list[tuple[object, ...]]:
    return query(db_url, "SELECT e.url, d.status, d.parked, count(*),"
                         " round(extract(epoch FROM max(d.next_attempt_at) - now()))"
                         " FROM deliveries d JOIN endpoints e ON e.id = d.endpoint_id"
                         " WHERE d.status <> 'delivered' GROUP BY 1, 2, 3 ORDER BY 4 DESC"
                         " LIMIT 10")


# solo: ~300 deliveries/s is all two shared cores give beside nothing else (scripts/test.sh)
@pytest.mark.solo
def test_two_sigkills_under_load_park_no_healthy_endpoint(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    for t in range(TENANTS):
        add_endpoint(db_url, receiver, f"t{t:02d}", f"t{t:02d}", behaviour=ANSWER)
    pipeline = start_pipeline()
    dispatcher = pipeline["dispatcher"]
    writer = Writer(db_url)
    writer.start()
    try:
        wait_until(lambda: len(receiver.arrivals) >= 1500, 60, 0.5,
                   message="the fleet under load")
        # The first kill: a plain crash, its partitions' backlog waiting for the restart.
        dispatcher.kill()
        time.sleep(DOWN_S)
        dispatcher.start().wait_healthy()
        time.sleep(15)
        # The second: every receiver hangs for 10 s around it, so the fresh process's first
        # observations are timeouts (5 s) of endpoints that are healthy again right after.
        for t in range(TENANTS):
            receiver.behaviour[f"t{t:02d}"] = HUNG
        time.sleep(2)
        dispatcher.kill()
        time.sleep(DOWN_S)
        dispatcher.start().wait_healthy()
        time.sleep(max(0.0, HANG_S - 2 - DOWN_S))
        for t in range(TENANTS):
            receiver.behaviour[f"t{t:02d}"] = ANSWER
        last_fault = time.monotonic()
        time.sleep(10)  # the load goes on a little after the last fault
        assert writer.error is None, writer.error
    finally:
        writer.halt.set()
        writer.join(10)
    assert writer.error is None, writer.error
    total = writer.written  # one endpoint per tenant: one delivery per event
    try:
        wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries"
                                          " WHERE status = 'delivered'") == total,
                   AFTER_FAULT_S - (time.monotonic() - last_fault), 1.0,
                   message=f"all {total} deliveries delivered within two minutes")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; not delivered (url, status, parked, count, latest"
                             f" due in s): {_not_delivered(db_url)}") from None
    log = dispatcher.log_path.read_text(errors="replace")
    assert "endpoint deferred without being served" not in log
    _assert_every_arrival_explained(db_url, receiver, total)


SWEEP_AFTER_S = 10.0  # the sweeper's bound, short: the stop below lasts four times it
STOPPED_S = 40.0


def test_tasks_waiting_in_a_stopped_dispatchers_partitions_are_not_swept_as_lost(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    # Issue #47: a dispatcher stopped for longer than the sweeper's bound comes back to
    # rows overdue by more than the bound whose tasks are only waiting in its partitions.
    # Its sweeper re-queued them as lost (duplicate tasks, HookstreamTasksLost firing for
    # nothing). It must wait for what the group has not read yet: no "lost" sweep, no
    # "without a task" line, every delivery delivered.
    for t in range(5):
        add_endpoint(db_url, receiver, f"e{t}", "acme", behaviour=Behaviour(delay_s=0.02))
    pipeline = start_pipeline(sweep_after_s=str(SWEEP_AFTER_S), sweep_interval_s="1",
                              lag_sample_interval_s="1")
    dispatcher = pipeline["dispatcher"]
    written = 0
    with psycopg.connect(db_url, autocommit=True) as conn:
        def write(n: int) -> None:
            nonlocal written
            with conn.transaction():
                for _ in range(n):
                    write_event(conn, tenant="acme", type="a.b", payload={"n": written})
                    written += 1

        write(20)
        wait_until(lambda: len(receiver.arrivals) >= 100, 60, 0.2, message="work under way")
        dispatcher.kill()
        stopped = time.monotonic()
        while time.monotonic() - stopped < STOPPED_S:  # 10 events/s while it is away
            write(5)
            time.sleep(0.5)
        dispatcher.start().wait_healthy()
        write(20)
    total = written * 5
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries"
                                      " WHERE status = 'delivered'") == total, 120, 1.0,
               message=f"all {total} deliveries delivered")
    # The sweeper only takes pending rows: a false "lost" sweep happened before this point.
    assert service_metric(dispatcher, "hookstream_dispatcher_swept_total", reason="lost") == 0
    assert "pending deliveries without a task re-queued" not in \
        dispatcher.log_path.read_text(errors="replace")
    _assert_every_arrival_explained(db_url, receiver, total)
