"""Consumer lag on the real broker, checked against Kafka's own ``kafka-consumer-groups``
(``ConsumerGroupCommand --describe``, run from the stack's Maven-resolved jars)."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hookstream.core.topics import Topics
from hookstream.dev.harness import free_port
from hookstream.dev.localstack.kafka import CONSUMER_GROUP_COMMAND, run_tool
from hookstream.ops.lag import LagSnapshot, consumer_lag_collector
from hookstream.ops.sampling import SampledCollector, SamplerHealth
from tests.conftest import Stack
from tests.helpers import wait_until

Exported = dict[tuple[str, str, int], float]  # (metric, topic, partition) → value


def _produce(bootstrap: str, topic: str, counts: dict[int, int],
             timestamps_ms: dict[int, list[int]] | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, n in counts.items():
        for i in range(n):
            ts = timestamps_ms[partition][i] if timestamps_ms else 0
            producer.produce(topic, value=b"x", partition=partition, timestamp=ts)
    assert producer.flush(30) == 0


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    # The group's offsets as a consumer that processed that far would leave them.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _scrape(collector: SampledCollector[LagSnapshot]) -> tuple[Exported, dict[str, float]]:
    registry = CollectorRegistry()
    registry.register(collector)
    registry.register(SamplerHealth([collector.sampler]))
    per_partition: Exported = {}
    other: dict[str, float] = {}
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "partition" in s.labels and "topic" in s.labels:
                per_partition[(s.name, s.labels["topic"], int(s.labels["partition"]))] = s.value
            else:
                other[f"{s.name}{sorted(s.labels.items())}"] = s.value
    return per_partition, other


def _describe(bootstrap: str, group: str) -> dict[tuple[str, int], dict[str, str]]:
    result = run_tool(CONSUMER_GROUP_COMMAND,
                      ["--bootstrap-server", bootstrap, "--describe", "--group", group],
                      timeout=120, check=True)
    rows: dict[tuple[str, int], dict[str, str]] = {}
    header: list[str] | None = None
    for line in result.stdout.splitlines():
        cols = line.split()
        if cols[:3] == ["GROUP", "TOPIC", "PARTITION"]:
            header = cols
        elif header and len(cols) == len(header) and cols[0] == group:
            row = dict(zip(header, cols, strict=True))
            rows[(row["TOPIC"], int(row["PARTITION"]))] = row
    assert rows, f"no rows in the tool's output:\n{result.stdout}\n{result.stderr}"
    return rows


def test_exported_lag_equals_what_kafka_consumer_groups_reports(
        stack: Stack, topics: Topics) -> None:
    topic, group = topics.events, f"lag-test-{uuid.uuid4().hex[:8]}"
    _produce(stack.bootstrap, topic, {0: 12, 1: 5, 2: 8})
    _commit(stack.bootstrap, group, {(topic, 0): 4, (topic, 1): 5})
    # the backlog keeps growing after the group's last commit
    _produce(stack.bootstrap, topic, {0: 3, 1: 2})

    collector = consumer_lag_collector(stack.bootstrap, {group: [topic]}, interval_s=5)
    try:
        assert collector.sampler.run_once()
        exported, totals = _scrape(collector)
    finally:
        collector.sampler.stop()
    tool = _describe(stack.bootstrap, group)

    for (t, p), row in tool.items():
        assert exported[("kafka_consumergroup_lag", t, p)] == int(row["LAG"]), row
        assert exported[("kafka_topic_partition_current_offset", t, p)] == \
            int(row["LOG-END-OFFSET"]), row
        assert exported[("kafka_consumergroup_current_offset", t, p)] == \
            int(row["CURRENT-OFFSET"]), row
    assert {k: v for k, v in exported.items() if k[0] == "kafka_consumergroup_lag"} == {
        ("kafka_consumergroup_lag", topic, 0): 11.0,   # 15 written, 4 committed
        ("kafka_consumergroup_lag", topic, 1): 2.0,    # 7 written, 5 committed
        # never committed: the tool prints "-" (or nothing); we count from the log start,
        # where a consumer with auto.offset.reset=earliest begins
        ("kafka_consumergroup_lag", topic, 2): 8.0,
    }
    assert tool.get((topic, 2), {}).get("LAG", "-") == "-"
    assert totals[f"kafka_consumergroup_group_topic_sum_lag"
                  f"{sorted({'consumergroup': group, 'topic': topic}.items())}"] == 21.0


def test_lag_seconds_is_the_age_of_the_record_at_the_committed_offset(
        stack: Stack, topics: Topics) -> None:
    topic, group = topics.events, f"lag-test-{uuid.uuid4().hex[:8]}"
    now_ms = int(time.time() * 1000)
    # partition 0: records written 300 s, 290 s, ... ago (10 s apart, so reading the
    # record next to the right one is 10 s off: well outside the tolerance below, which
    # only absorbs the time between the scrape and this test's clock); 1: caught up
    stamps = {0: [now_ms - (300 - 10 * i) * 1000 for i in range(10)], 1: [now_ms] * 3}
    _produce(stack.bootstrap, topic, {0: 10, 1: 3}, stamps)
    _commit(stack.bootstrap, group, {(topic, 0): 4, (topic, 1): 3})

    collector = consumer_lag_collector(stack.bootstrap, {group: [topic]}, interval_s=5)
    try:
        assert collector.sampler.run_once()
        exported, _ = _scrape(collector)
    finally:
        collector.sampler.stop()
    age = exported[("kafka_consumergroup_lag_seconds", topic, 0)]
    expected = time.time() - stamps[0][4] / 1000  # the first record not consumed: offset 4
    assert abs(age - expected) < 3.0, (age, expected)
    assert exported[("kafka_consumergroup_lag_seconds", topic, 1)] == 0.0


def test_a_scrape_does_not_wait_on_an_unreachable_broker() -> None:
    # Nothing listens on this port: every Kafka call of the sampler blocks until its timeout.
    collector = consumer_lag_collector(f"127.0.0.1:{free_port()}", {"g": ["t"]}, interval_s=1)
    collector.sampler.start()
    try:
        for _ in range(3):
            started = time.monotonic()
            exported, other = _scrape(collector)
            # Waiting on the broker would take the sampler's 5 s Kafka timeout; the bound
            # is generous on purpose (shared cores), a scrape takes milliseconds.
            assert time.monotonic() - started < 2.0
            assert not exported  # no lag series rather than made-up zeros
        wait_until(lambda: collector.sampler.errors >= 1, 15, message="a failed sample")
        _, other = _scrape(collector)
        assert other["hookstream_sampler_errors_total[('sampler', 'consumer_lag')]"] >= 1
    finally:
        collector.sampler.stop(timeout_s=15)
