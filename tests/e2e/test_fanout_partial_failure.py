"""The fanout process SIGKILLed half way through a large event: after a restart the event
is processed again, the missing rows are created, the existing rows are untouched and
every row has a task (a row may have two: harmless, the dispatcher's lease check)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psycopg

from hookstream.core.topics import Topics
from hookstream.dev.harness import ServiceProcess, pipeline_env
from tests.conftest import Stack
from tests.helpers import query, scalar, stop_cleanly, wait_until
from tests.relay_fanout_support import add_endpoints, envelope, produce_events, read_tasks


def test_fanout_killed_half_way_through_a_large_event_completes_it_after_restart(
        stack: Stack, db_url: str, topics: Topics, log_dir: Path) -> None:
    endpoints = add_endpoints(db_url, "big", 10_000)
    env = pipeline_env(database_url=db_url, bootstrap=stack.bootstrap,
                       topic_prefix=topics.prefix, fanout_max_rows_per_statement="1000")
    event = envelope("big", "invoice.paid")
    # Half way, deterministically: an open transaction of ours has inserted the delivery
    # row of the 5,001st endpoint (same event, endpoint and commit time), so the
    # statement creating that row waits on the unique key until we end ours, and the
    # fanout stops there with 5,000 rows committed. (Rolled back when we close, so the
    # row is the second pass's to create.)
    blocker = psycopg.connect(db_url)
    blocker.execute(
        "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
        " expires_at, committed_at) VALUES (%s, %s, 'big', 1, now(), %s)",
        (event.event_id, endpoints[5000], event.committed_at))
    first = ServiceProcess("fanout", env, log_dir / "fanout-1.log").start()
    try:
        first.wait_healthy()
        produce_events(stack.bootstrap, topics.events, [event])
        wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries") == 5000, 60,
                   message="the first half committed")
        # The positive signal that it stopped exactly there: its next statement waits on
        # the lock we hold (and nothing else moved meanwhile).
        wait_until(lambda: scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE"
                                          " datname = current_database() AND"
                                          " wait_event_type = 'Lock'") >= 1, 30,
                   message="the fanout's next statement waiting on the held lock")
        assert scalar(db_url, "SELECT count(*) FROM deliveries") == 5000
        first.kill()
    finally:
        first.kill()
        blocker.close()
    before = dict(query(db_url, "SELECT delivery_id::text, created_at FROM deliveries"))
    assert len(before) == 5000

    second = ServiceProcess("fanout", env, log_dir / "fanout-2.log").start()
    try:
        second.wait_healthy()
        # The killed member still holds its partitions until its session times out
        # (10 s); then the event, whose offset was never committed, is read again.
        wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries") == 10_000, 60,
                   message="the missing rows created")
        rows = query(db_url, "SELECT delivery_id::text, endpoint_id::text, created_at"
                             " FROM deliveries")
        wait_until(lambda: len(set(Counter(str(t.delivery_id) for t in read_tasks(
            stack.bootstrap, topics.deliveries)))) >= 10_000, 30, message="every task produced")
    finally:
        stop_cleanly(second)
    assert sorted(r[1] for r in rows) == endpoints  # exactly one row per endpoint
    # Rows of the first pass untouched: same ids, same creation times.
    assert {r[0]: r[2] for r in rows if r[0] in before} == before
    tasks = Counter(str(t.delivery_id) for t in read_tasks(stack.bootstrap, topics.deliveries))
    assert set(tasks) == {r[0] for r in rows}  # every row has a task ...
    # ... and a row of the first half may have two (the first pass produced some tasks
    # before dying, the second pass produces them again for rows still pending).
    duplicated = {d for d, n in tasks.items() if n > 1}
    assert duplicated <= set(before)
