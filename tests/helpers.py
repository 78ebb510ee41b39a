from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import psycopg
from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from hookstream.core.topics import Topics
from hookstream.dev.harness import ServiceProcess

T = TypeVar("T")


def watermarks(c: Consumer, tp: TopicPartition, timeout_s: float = 10.0) -> tuple[int, int]:
    """(low, high) of one partition. Right after a topic is created the broker may still
    answer NOT_LEADER_FOR_PARTITION (or not know the topic) for a moment: such an answer
    means "ask again", so it is retried until the deadline and raised only after it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = c.get_watermark_offsets(tp, timeout=timeout_s)
            return low, high
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def wait_until(fn: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.1,
               message: str = "condition") -> T:
    """Poll ``fn`` until it returns something truthy; fail with the last value otherwise."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"{message} not reached within {timeout_s}s (last: {last!r})")


def wait_delivered(db_url: str, total: int, timeout_s: float) -> None:
    """Until ``total`` deliveries are delivered; fails with the count by status."""
    def statuses() -> dict[str, int]:
        return dict(query(db_url, "SELECT status, count(*) FROM deliveries GROUP BY 1"))

    try:
        wait_until(lambda: statuses().get("delivered") == total, timeout_s, interval_s=0.5,
                   message=f"all {total} delivered")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; by status: {statuses()}") from None


def query(db_url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(sql, params).fetchall()


def scalar(db_url: str, sql: str, params: Any = None) -> Any:
    rows = query(db_url, sql, params)
    return rows[0][0] if rows else None


# -- positive signals: "it has been processed", so that "nothing new" means something ------

Offsets = dict[tuple[str, int], int]


def end_offsets(bootstrap: str, topics: Iterable[str], timeout_s: float = 10.0) -> Offsets:
    """(topic, partition) → high watermark: the offset the next record will get."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    try:
        out: Offsets = {}
        for topic in topics:
            meta = c.list_topics(topic, timeout=timeout_s).topics[topic]
            assert meta.error is None, meta.error
            for p in meta.partitions:
                _, high = watermarks(c, TopicPartition(topic, p), timeout_s)
                out[(topic, p)] = high
        return out
    finally:
        c.close()


def committed_offsets(bootstrap: str, group: str, tps: Iterable[tuple[str, int]],
                      timeout_s: float = 10.0) -> Offsets:
    """What ``group`` has committed (-1 where nothing yet). Read with a consumer of that
    group id that never subscribes: it does not join the group, nothing rebalances."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(t, p) for t, p in tps], timeout=timeout_s)
        return {(tp.topic, tp.partition): max(tp.offset, -1) for tp in got}
    finally:
        c.close()


def wait_committed_past(bootstrap: str, group: str, ends: Offsets,
                        timeout_s: float = 30.0) -> None:
    """Wait until ``group`` has committed at or beyond ``ends`` (from ``end_offsets``) on
    every partition that has records: every record written before ``ends`` was taken was
    processed to the end, since the services commit only after the outcome is durable."""
    wanted = {tp: end for tp, end in ends.items() if end > 0}
    deadline = time.monotonic() + timeout_s
    while True:
        got = committed_offsets(bootstrap, group, wanted)
        behind = {tp: (got[tp], end) for tp, end in wanted.items() if got[tp] < end}
        if not behind:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{group} not committed past the end offsets within"
                                 f" {timeout_s}s: (committed, end) {behind}")
        time.sleep(0.2)


def wait_drained(bootstrap: str, groups: dict[str, list[str]], timeout_s: float = 60.0) -> None:
    """Wait until every group in ``groups`` (group → the topics it consumes) has processed
    everything on its topics, including what the others produced meanwhile: the end
    offsets are taken again after each wait, until they no longer move. Then no task is
    pending anywhere in Kafka, and nothing can happen later that is not caused anew."""
    deadline = time.monotonic() + timeout_s
    topics = sorted({t for ts in groups.values() for t in ts})
    ends = end_offsets(bootstrap, topics)
    while True:
        for group, ts in groups.items():
            wait_committed_past(bootstrap, group, {tp: o for tp, o in ends.items() if tp[0] in ts},
                                max(1.0, deadline - time.monotonic()))
        again = end_offsets(bootstrap, topics)
        if again == ends:
            return
        assert time.monotonic() < deadline, f"still moving after {timeout_s}s: {again}"
        ends = again


def pipeline_groups(topics: Topics) -> dict[str, list[str]]:
    """The consumer groups of a harness pipeline (hookstream.dev.harness.pipeline_env names
    them after the topic prefix) and what each consumes."""
    dispatcher = f"{topics.prefix}-dispatcher"
    return {f"{topics.prefix}-fanout": [topics.events],
            dispatcher: [topics.deliveries],
            f"{dispatcher}-delay": topics.tiers.topics}


def metric_value(exposition: bytes | str, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels`` (0 if none)."""
    text = exposition.decode() if isinstance(exposition, bytes) else exposition
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and labels.items() <= s.labels.items())


def service_metric(service: ServiceProcess, name: str, **labels: str) -> float:
    code, body = service.get("/metrics")
    assert code == 200, (service.name, code)
    return metric_value(body, name, **labels)


def stop_cleanly(*services: ServiceProcess) -> None:
    """SIGTERM each; each must drain and exit 0 within the harness's bound (or have been
    SIGKILLed on purpose with ``kill()``)."""
    problems = []
    for s in services:
        s.terminate()
        if (problem := s.exit_problem()) is not None:
            problems.append(problem)
    assert not problems, "\n\n".join(problems)
