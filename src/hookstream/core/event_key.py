"""The Kafka key of an event record: which events must meet on one partition of the
events topic, and which may spread.

Until issue #16 the key was the tenant, so one hot tenant was one partition and one
fanout consumer. Only two things need events to share a partition:

* **coalescing**: the fanout supersedes the older pending deliveries of an (endpoint,
  coalescing key) when a newer event of the key arrives (``coalesce`` in
  ``sql/fanout.sql``). Two fanouts comparing events of one key in concurrent
  transactions do not see each other's rows, so both could leave a delivery pending (and
  contend for the same row locks). One partition means one consumer, which handles
  them one batch after another.
* **per-object order** (not promised today, possible later): the events of one object
  must be on one partition for any consumer to see them in order.

So the key is the tenant, a NUL, then the first of: the coalescing key, the object id,
the event id. Events of a coalescing key always meet; the events of an object meet
when they carry the same coalescing key or none (the documented use is a coalescing key
naming the entity, e.g. ``order-42``, so the two agree); everything else spreads by
event id. No tag says which of the three the suffix is: a coalescing key equal to an
object id lands with that object's unkeyed events, which is what a producer using the
object's id as its coalescing key wants; an accidental equality only shares a partition.

The tenant stays in front so the key still names the tenant in a dead letter or a
console tool, and so two tenants' equal coalescing keys stay apart. PostgreSQL text
cannot hold a NUL, so the separator never occurs inside a tenant: a key splits back into
one (tenant, suffix) pair.
"""

from __future__ import annotations

import zlib

SEPARATOR = b"\x00"


def event_key(tenant: str, coalescing_key: str | None, object_id: str | None,
              event_id: str) -> bytes:
    """The Kafka key of one event record (see the module docstring). ``None`` means
    absent; an empty string is a value (the fanout coalesces ``''`` like any key)."""
    suffix = (coalescing_key if coalescing_key is not None
              else object_id if object_id is not None else event_id)
    return tenant.encode() + SEPARATOR + suffix.encode()


def partition_of(key: bytes, partitions: int) -> int:
    """The partition the relay's producer writes ``key`` to: librdkafka's
    ``consistent_random`` partitioner (its default, pinned in
    ``hookstream.io.kafka.producer_config``), CRC-32 of the key modulo the partition
    count. Not Java's murmur2: a Java client would place the same key elsewhere."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return zlib.crc32(key) % partitions
