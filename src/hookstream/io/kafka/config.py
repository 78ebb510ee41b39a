"""The one place that knows confluent-kafka's configuration keys: the producer's, the
consumer's and the group membership's."""

from __future__ import annotations

import logging

from hookstream.core.group import DEFAULT_MEMBERSHIP, Membership

# librdkafka's own log lines (of the admin helpers in admin.py too) go through Python
# logging here instead of straight to stderr: a command line shows them only with --debug
# (a broker that cannot be reached is one clear error, not hundreds of connect lines).
client_log = logging.getLogger("hookstream.io.kafka.client")


def producer_config(bootstrap: str, client_id: str, **overrides: object) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        # librdkafka's own lines through Python logging (the service's log format and
        # level), not raw on stderr.
        "logger": client_log,
        # Idempotence forces acks=all and bounded in-flight requests, so a retried
        # send never duplicates or reorders within a partition.
        "enable.idempotence": True,
        "acks": "all",
        # Latency at low load (issue #15): a record is sent at once. librdkafka wakes
        # its broker thread in whole milliseconds, so any linger (even 0.1) costs ~1 ms
        # per hop: producer → consumer p50 ~0.5 ms at linger 0 against ~1.6 ms at 1
        # (benchmarks.kafka_hop; 1.9 against 3.0 ms for bursts of 24). At high load
        # batches still fill: records queue behind the in-flight requests (up to
        # batch.num.messages), and a call's records are queued together (_produce_all).
        # At 4,000 offered deliveries/s linger 0 and 1 measured alike (benchmarks/pipeline.py,
        # benchmarks/kafka_hop.py; BENCHMARKS.md, Kafka hop).
        "linger.ms": 0,
        "batch.num.messages": 10_000,
        "compression.type": "lz4",
        # A batch that cannot be acknowledged within this bound is reported as failed
        # and stays unpublished/uncommitted, to be retried; nothing waits forever.
        "message.timeout.ms": 30_000,
        # librdkafka's default, pinned: CRC-32 of the key (core.event_key.partition_of).
        # Every producer of a topic must place a key alike (the fanout, the reaper and
        # the delay consumer all write the deliveries topic), so a key's partition is a
        # decision here, not whatever a client version defaults to.
        "partitioner": "consistent_random",
    }
    config.update(overrides)
    return config


def consumer_config(
    bootstrap: str, group_id: str, client_id: str, membership: Membership = DEFAULT_MEMBERSHIP,
    **overrides: object
) -> dict[str, object]:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "client.id": client_id,
        "logger": client_log,
        # Offsets are committed by the service only after the outcome is durable.
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "max.poll.interval.ms": 300_000,
        # librdkafka prefetches up to 100k messages per partition by default: hundreds of
        # MB of RSS under a large backlog. We read 500 at a time; a few thousand ahead is
        # plenty and keeps the services' memory flat whatever the lag.
        "queued.min.messages": 5_000,
        "queued.max.messages.kbytes": 8_192,
        **membership_config(membership),
    }
    config.update(overrides)
    return config


def membership_config(membership: Membership) -> dict[str, object]:
    """The client keys of ``membership``. Under KIP-848 the broker assigns (server-side
    assignor, incremental) and holds the timeouts: librdkafka refuses session.timeout.ms,
    heartbeat.interval.ms and partition.assignment.strategy with that protocol."""
    if membership.broker_side:
        return {"group.protocol": "consumer"}
    return {
        "group.protocol": "classic",
        # A SIGKILLed member holds its partitions until its session times out.
        "session.timeout.ms": membership.session_timeout_ms,
        "heartbeat.interval.ms": membership.heartbeat_interval_ms,
        # Incremental: a rebalance moves only the partitions that change owner, the
        # others keep flowing (the same semantics KIP-848 has by construction).
        "partition.assignment.strategy": "cooperative-sticky",
    }

