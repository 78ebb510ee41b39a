"""How the relay keys the events topic (core.event_key), read back from the real broker:
one tenant's events spread over the partitions, while the events that may supersede each
other (one coalescing key) or belong to one object meet on one."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from hookstream.relay.outbox_store import OutboxStore
from hookstream.relay.service import Relay
from prometheus_client import CollectorRegistry

from hookstream.core.codec import EventEnvelope
from hookstream.core.event_key import event_key, partition_of
from hookstream.core.settings import RelaySettings
from hookstream.core.topics import Topics
from hookstream.outbox import write_event
from tests.conftest import Stack
from tests.relay_fanout_support import read_topic

PARTITIONS = 3  # the `topics` fixture's


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def _publish_all(stack: Stack, db_url: str, topics: Topics) -> dict[str, tuple[int, bytes]]:
    """Runs relay rounds until the outbox is empty; returns each published event's
    (partition, key) as read from the events topic."""
    relay = Relay(RelaySettings(database_url=db_url, kafka_bootstrap=stack.bootstrap,
                                topic_prefix=topics.prefix), CollectorRegistry())
    try:
        with OutboxStore.connect(db_url) as store:
            for _ in range(50):
                if relay.publish_round(store).published == 0:
                    break
    finally:
        relay.publisher.close()
    out: dict[str, tuple[int, bytes]] = {}
    for m in read_topic(stack.bootstrap, topics.events):
        ev = EventEnvelope.decode(m.value() or b"")
        out[str(ev.event_id)] = (m.partition() or 0, m.key() or b"")
    return out


def test_one_tenant_spreads_over_the_partitions_while_a_coalescing_key_stays_on_one(
        stack: Stack, db_url: str, topics: Topics, conn: psycopg.Connection) -> None:
    distinct = [write_event(conn, tenant="acme", type="invoice.paid", payload={"i": i},
                            object_id=f"inv-{i}", object_version=1) for i in range(60)]
    # Five versions each of three orders, some under another object id: the key decides.
    keyed = {k: [write_event(conn, tenant="acme", type="order.updated", payload={"v": v},
                             object_id=f"order-{k}" if v % 2 else f"line-{k}-{v}",
                             object_version=v, coalescing_key=f"order-{k}")
                 for v in range(5)] for k in range(3)}
    # Three events of one object without a coalescing key (per-object order, later).
    one_object = [write_event(conn, tenant="acme", type="invoice.updated", payload={"v": v},
                              object_id="inv-0", object_version=v + 2) for v in range(3)]
    unkeyed = [write_event(conn, tenant="acme", type="ping", payload={}) for _ in range(30)]

    published = _publish_all(stack, db_url, topics)

    assert len(published) == 60 + 15 + 3 + 30
    # The hot tenant is no longer one partition: distinct objects, and events with
    # neither object nor coalescing key, use all of them.
    assert {published[str(e)][0] for e in distinct} == set(range(PARTITIONS))
    assert {published[str(e)][0] for e in unkeyed} == set(range(PARTITIONS))
    # Every version of a coalescing key on one partition (one fanout compares them),
    # whatever its object id; an object's unkeyed events with its first one.
    for events in keyed.values():
        assert len({published[str(e)] for e in events}) == 1
    assert {published[str(e)] for e in one_object} == {published[str(distinct[0])]}
    # The broker put every record where partition_of says: the hash the unit tests
    # measure the spread with is the producer's own.
    for partition, key in published.values():
        assert partition == partition_of(key, PARTITIONS), key
        assert key.startswith(b"acme\x00")
    assert published[str(keyed[1][0])][1] == event_key("acme", "order-1", None, "")
    assert published[str(distinct[7])][1] == b"acme\x00inv-7"
    assert published[str(unkeyed[0])][1] == b"acme\x00" + str(unkeyed[0]).encode()
