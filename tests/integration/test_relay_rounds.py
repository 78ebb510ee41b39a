"""Publish rounds of the relay on the real PostgreSQL and Kafka (the Relay object in
process, driven round by round so each test controls the interleaving)."""

from __future__ import annotations

import base64
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hookstream.relay.outbox_store import OutboxStore
from hookstream.relay.service import Relay, RoundResult
from prometheus_client import CollectorRegistry

from hookstream.core.codec import EventEnvelope
from hookstream.core.settings import RelaySettings
from hookstream.core.topics import Topics, TopicSpec
from hookstream.io.kafka import KafkaTransient, delete_topics, ensure_topics
from hookstream.outbox import write_event
from tests.conftest import Stack
from tests.helpers import query, scalar, wait_until
from tests.relay_fanout_support import metric, read_topic


def _relay(stack: Stack, db_url: str, topics: Topics, **overrides: object) -> Relay:
    settings = RelaySettings(database_url=db_url, kafka_bootstrap=stack.bootstrap,
                             topic_prefix=topics.prefix, **overrides)  # type: ignore[arg-type]
    return Relay(settings, CollectorRegistry())


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


@pytest.fixture
def store(db_url: str) -> Iterator[OutboxStore]:
    with OutboxStore.connect(db_url) as s:
        yield s


def _published_ids(stack: Stack, topics: Topics) -> list[str]:
    return [str(EventEnvelope.decode(m.value() or b"").event_id)
            for m in read_topic(stack.bootstrap, topics.events)]


def _rounds_until_empty(relay: Relay, store: OutboxStore, limit: int = 50) -> int:
    rounds = 0
    while rounds < limit:
        rounds += 1
        result = relay.publish_round(store)
        if result.published == 0 and result.quarantined == 0:
            return rounds
    raise AssertionError("the outbox never drained")


def test_relay_publishes_a_late_committing_row_on_a_later_round(
        stack: Stack, db_url: str, topics: Topics, conn: psycopg.Connection,
        store: OutboxStore) -> None:
    relay = _relay(stack, db_url, topics)
    with psycopg.connect(db_url) as late:
        # The late transaction takes the lower id, then stays open across a round.
        late_id = write_event(late, tenant="acme", type="invoice.paid", payload={"n": 1})
        early_id = write_event(conn, tenant="acme", type="invoice.paid", payload={"n": 2})
        assert scalar(db_url, "SELECT count(*) FROM outbox WHERE event_id = %s",
                      (late_id,)) == 0  # not visible to anyone else yet
        result = relay.publish_round(store)
        assert result.published == 1
        assert _published_ids(stack, topics) == [str(early_id)]
        late.commit()
    ids = dict(query(db_url, "SELECT event_id::text, id FROM outbox"))
    assert ids[str(late_id)] < ids[str(early_id)]  # committed later, yet a lower id
    assert relay.publish_round(store).published == 1
    assert sorted(_published_ids(stack, topics)) == sorted([str(early_id), str(late_id)])
    assert scalar(db_url, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 0


def test_relay_publishes_batches_of_hundreds_per_round(
        stack: Stack, db_url: str, topics: Topics, conn: psycopg.Connection,
        store: OutboxStore) -> None:
    conn.execute("INSERT INTO outbox (event_id, tenant, type, payload)"
                 " SELECT gen_random_uuid(), 'acme', 'invoice.paid', '{}'::bytea"
                 " FROM generate_series(1, 1200)")
    relay = _relay(stack, db_url, topics, batch_size=500)
    results = [relay.publish_round(store) for _ in range(3)]
    assert [(r.published, r.full) for r in results] == [(500, True), (500, True), (200, False)]
    assert len(set(_published_ids(stack, topics))) == 1200
    assert metric(relay_registry(relay), "hookstream_relay_batch_rows_sum") == 1200
    assert metric(relay_registry(relay), "hookstream_relay_batch_rows_count") == 3


def test_relay_quarantines_malformed_rows_without_blocking_the_rows_behind(
        stack: Stack, db_url: str, topics: Topics, conn: psycopg.Connection,
        store: OutboxStore) -> None:
    relay = _relay(stack, db_url, topics, batch_size=2, max_payload_bytes=10_000)
    bad_version = write_event(conn, tenant="acme", type="invoice.paid", payload={},
                              schema_version=7)
    good = [write_event(conn, tenant="acme", type="invoice.paid", payload={"i": 0})]
    not_json = write_event(conn, tenant="acme", type="invoice.paid", payload=b"{not json")
    good.append(write_event(conn, tenant="acme", type="invoice.paid", payload={"i": 1}))
    too_big = write_event(conn, tenant="acme", type="invoice.paid",
                          payload={"blob": "x" * 20_000})
    good.append(write_event(conn, tenant="acme", type="invoice.paid", payload={"i": 2}))

    _rounds_until_empty(relay, store)

    assert sorted(_published_ids(stack, topics)) == sorted(str(g) for g in good)
    reasons = dict(query(db_url, "SELECT event_id, quarantine_reason FROM outbox"
                                 " WHERE quarantined_at IS NOT NULL AND published_at IS NULL"))
    assert set(reasons) == {bad_version, not_json, too_big}
    assert "unknown schema_version 7" in reasons[bad_version]
    assert "not valid JSON" in reasons[not_json]
    assert "exceeds the 10000-byte limit" in reasons[too_big]
    for category in ("schema_version", "json", "too_large"):
        assert metric(relay_registry(relay), "hookstream_relay_quarantined_total",
                      {"reason": category}) == 1
    assert scalar(db_url, "SELECT count(*) FROM outbox WHERE published_at IS NULL"
                          " AND quarantined_at IS NULL") == 0


def relay_registry(relay: Relay) -> CollectorRegistry:
    return relay.metrics.registry


def test_relay_quarantines_a_record_the_broker_refuses(
        stack: Stack, db_url: str, conn: psycopg.Connection,
        store: OutboxStore) -> None:
    # A topic whose size limit is below the relay's own payload limit: the broker
    # answers MESSAGE_TOO_LARGE, a refusal that no retry can fix.
    topics = Topics(f"t{uuid.uuid4().hex[:10]}")
    specs = [TopicSpec(s.name, s.partitions, {**s.config, "max.message.bytes": "20000"})
             if s.name == topics.events else s for s in topics.specs(partitions=1)]
    ensure_topics(stack.bootstrap, specs)
    try:
        relay = _relay(stack, db_url, topics)
        before = write_event(conn, tenant="acme", type="invoice.paid", payload={"i": 0})
        blob = base64.b64encode(os.urandom(60_000)).decode()  # incompressible, ~80 kB
        refused = write_event(conn, tenant="acme", type="invoice.paid", payload={"blob": blob})
        after = write_event(conn, tenant="acme", type="invoice.paid", payload={"i": 1})

        result = relay.publish_round(store)

        assert (result.published, result.quarantined) == (2, 1)
        assert sorted(_published_ids(stack, topics)) == sorted([str(before), str(after)])
        (reason,), = query(db_url, "SELECT quarantine_reason FROM outbox WHERE event_id = %s",
                           (refused,))
        assert "rejected by the broker (MSG_SIZE_TOO_LARGE)" in reason
        assert metric(relay_registry(relay), "hookstream_relay_quarantined_total",
                      {"reason": "broker_rejected"}) == 1
    finally:
        delete_topics(stack.bootstrap, [s.name for s in specs])


def test_relay_purges_published_rows_past_the_retention_in_batches(
        stack: Stack, db_url: str, topics: Topics, conn: psycopg.Connection,
        store: OutboxStore) -> None:
    conn.execute("INSERT INTO outbox (event_id, tenant, type, payload)"
                 " SELECT gen_random_uuid(), 'acme', 'invoice.paid', '{}'::bytea"
                 " FROM generate_series(1, 30)")
    relay = _relay(stack, db_url, topics, retention_s=86_400.0, purge_batch_size=4)
    _rounds_until_empty(relay, store)
    # 23 rows were published two days ago, 7 just now; plus an old quarantined row and
    # an old unpublished one, which retention must never touch.
    conn.execute("UPDATE outbox SET published_at = now() - interval '2 days'"
                 " WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT 23)")
    conn.execute("INSERT INTO outbox (event_id, tenant, type, payload, created_at,"
                  " quarantined_at, quarantine_reason) VALUES (gen_random_uuid(), 'acme',"
                  " 'x', 'x', now() - interval '9 days', now() - interval '9 days', 'bad')")
    with psycopg.connect(db_url) as hold:  # an unpublished row, held open: not purged
        write_event(hold, tenant="acme", type="invoice.paid", payload={})
        deleted = relay.purge(store)
    assert deleted == 23
    assert metric(relay_registry(relay), "hookstream_relay_purged_total") == 23
    assert scalar(db_url, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL") == 7
    assert scalar(db_url, "SELECT count(*) FROM outbox WHERE quarantined_at IS NOT NULL") == 1
    assert scalar(db_url, "SELECT count(*) FROM outbox WHERE published_at IS NULL") == 2
    assert relay.purge(store) == 0


def test_relay_backlog_gauges(stack: Stack, db_url: str, topics: Topics,
                              conn: psycopg.Connection,
        store: OutboxStore) -> None:
    relay = _relay(stack, db_url, topics)
    for minutes in (1, 5, 0):
        conn.execute("INSERT INTO outbox (event_id, tenant, type, payload, created_at)"
                     " VALUES (gen_random_uuid(), 'acme', 'invoice.paid', '{}',"
                     " now() - make_interval(mins => %s))", (minutes,))
    relay.refresh_backlog(store)
    reg = relay_registry(relay)
    assert metric(reg, "hookstream_outbox_backlog_rows") == 3
    assert 300 <= metric(reg, "hookstream_outbox_oldest_unpublished_seconds") < 330
    relay.publish_round(store)
    relay.refresh_backlog(store)
    assert metric(reg, "hookstream_outbox_backlog_rows") == 0
    assert metric(reg, "hookstream_outbox_oldest_unpublished_seconds") == 0
    assert metric(reg, "hookstream_relay_published_total") == 3
    assert metric(reg, "hookstream_relay_batch_seconds_count") == 1


def test_relay_holds_no_transaction_while_it_waits_for_the_broker(
        stack: Stack, db_url: str, topics: Topics, conn: psycopg.Connection,
        store: OutboxStore) -> None:
    # Nothing listens on this port: the round waits out its acknowledgement timeout.
    relay = Relay(RelaySettings(database_url=db_url, kafka_bootstrap="127.0.0.1:1",
                                topic_prefix=topics.prefix, ack_timeout_s=2.0),
                  CollectorRegistry())
    write_event(conn, tenant="acme", type="invoice.paid", payload={"n": 1})
    waiting = threading.Event()
    publish = relay.publisher.publish

    def publish_and_signal(records: Any, wait_s: float | None = None) -> Any:
        waiting.set()
        return publish(records, wait_s)

    relay.publisher.publish = publish_and_signal  # type: ignore[method-assign]
    outcome: list[BaseException | RoundResult] = []

    def one_round() -> None:
        try:
            outcome.append(relay.publish_round(store))
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=one_round)
    worker.start()
    try:
        assert waiting.wait(10), "the round never reached the broker"
        # While the round waits for Kafka its session is idle: no open transaction, so
        # no row lock held and no snapshot pinning vacuum's horizon.
        (state, xact_start, xmin), = query(
            db_url, "SELECT state, xact_start, backend_xmin FROM pg_stat_activity"
                    " WHERE pid = %s", (store.conn.info.backend_pid,))
        assert (state, xact_start, xmin) == ("idle", None, None)
    finally:
        worker.join(30)
        relay.publisher.close(0)
    assert isinstance(outcome[0], KafkaTransient), outcome
    # The failed rows are handed back at once: the next round (here, a relay with a
    # reachable broker) publishes them without waiting for any claim to run out.
    assert _relay(stack, db_url, topics).publish_round(store).published == 1
    assert len(_published_ids(stack, topics)) == 1


def _claim_as(conn: psycopg.Connection, row_id: int, token: int, until: str) -> None:
    conn.execute("UPDATE outbox SET claimed_by = %s, claimed_until = now() + %s::interval"
                 " WHERE id = %s", (token, until, row_id))


def test_relay_claims_skip_live_claims_and_take_over_dead_or_expired_ones(
        stack: Stack, db_url: str, topics: Topics, conn: psycopg.Connection,
        store: OutboxStore) -> None:
    ids = [conn.execute("INSERT INTO outbox (event_id, tenant, type, payload) VALUES"
                        " (gen_random_uuid(), 'acme', 'invoice.paid', '{}') RETURNING id"
                        ).fetchone()[0] for _ in range(4)]  # type: ignore[index]
    with OutboxStore.connect(db_url) as other:  # another relay, alive and connected
        _claim_as(conn, ids[0], other.token, "1 minute")   # live claim: left alone
        _claim_as(conn, ids[1], other.token, "-1 second")  # alive but past its lease
        _claim_as(conn, ids[2], other.token + 1 if other.token + 1 != store.token
                  else other.token + 2, "1 minute")          # its claimer is gone
        # ids[3] was never claimed
        relay = _relay(stack, db_url, topics)
        assert relay.publish_round(store).published == 3
        assert scalar(db_url, "SELECT count(*) FROM outbox WHERE published_at IS NULL"
                              " AND id = %s", (ids[0],)) == 1
        other_pid = other.conn.info.backend_pid
    # The other relay's session ended (a crash ends it the same way): once the server has
    # noticed (its backend is gone; the client's close does not wait for that), the claim
    # is void.
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                              (other_pid,)) == 0, 10, message="the other session ended")
    assert relay.publish_round(store).published == 1
    assert len(_published_ids(stack, topics)) == 4
    assert scalar(db_url, "SELECT count(*) FROM outbox WHERE claimed_by IS NOT NULL") == 0


def test_relay_lanes_claiming_together_never_take_the_same_row(
        stack: Stack, db_url: str, topics: Topics, conn: psycopg.Connection) -> None:
    conn.execute("INSERT INTO outbox (event_id, tenant, type, payload)"
                 " SELECT gen_random_uuid(), 'acme', 'invoice.paid', '{}'::bytea"
                 " FROM generate_series(1, 600)")
    with OutboxStore.connect(db_url) as a, OutboxStore.connect(db_url) as b:
        first = a.claim(250, 60.0)
        second = b.claim(250, 60.0)
        third = a.claim(250, 60.0)
    taken = [r[0] for r in first + second + third]
    assert (len(first), len(second), len(third)) == (250, 250, 100)
    assert len(set(taken)) == 600
