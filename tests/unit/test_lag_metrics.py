"""The pure parts of the lag exporter and the background sampling: no broker, no database."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hookstream.ops.db_metrics import DeliveryStats, EndpointStats, KindStats, delivery_families
from hookstream.ops.lag import (
    LagSnapshot,
    PartitionLag,
    interpolate_append_time,
    lag_families,
    lag_of,
    oldest_waiting_s,
)
from hookstream.ops.sampling import BackgroundSampler, SampledCollector, SamplerHealth


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.mark.parametrize("committed, log_start, hw, expected", [
    (3, 0, 10, 7),      # the plain case: high watermark − committed
    (10, 0, 10, 0),     # caught up
    (None, 0, 4, 4),    # never committed: resumes at the log start (auto.offset.reset=earliest)
    (None, 3, 4, 1),    # ... which retention may have moved
    (None, None, 0, 0),
])
def test_lag_is_high_watermark_minus_where_the_group_resumes(
        committed: int | None, log_start: int | None, hw: int, expected: int) -> None:
    assert lag_of(committed, log_start, hw) == expected


@pytest.mark.parametrize("history, offset, expected", [
    ([], 5, None),                                   # no sample yet
    ([(3, 100.0)], 5, None),                         # offset not written yet at any sample
    ([(10, 100.0)], 5, None),                        # older than the history: unknown
    ([(0, 100.0), (10, 110.0)], 0, 101.0),           # first record of the interval
    ([(0, 100.0), (10, 110.0)], 9, 110.0),           # last record of the interval
    ([(0, 100.0), (10, 110.0), (20, 200.0)], 14, 155.0),  # hw reached 15 halfway
])
def test_interpolated_append_time(history: list[tuple[int, float]], offset: int,
                                  expected: float | None) -> None:
    assert interpolate_append_time(history, offset) == expected


@given(st.lists(st.integers(0, 50), min_size=1, max_size=20), st.integers(0, 1000))
def test_interpolation_is_monotone_and_within_the_sampled_times(
        steps: list[int], offset: int) -> None:
    hw, history = 0, []
    for i, step in enumerate(steps):
        hw += step
        history.append((hw, 1000.0 + 10 * i))
    at = interpolate_append_time(history, offset)
    if hw <= offset or history[0][0] > offset:
        # not written yet, or written before the first sample (an unknown age, not a bound)
        assert at is None
    else:
        assert at is not None and history[0][1] <= at <= history[-1][1]
        later = interpolate_append_time(history, offset + 1)
        assert later is None or later >= at  # a later record was not appended earlier


def test_lag_families_export_conventional_names_and_sum_per_group_topic() -> None:
    snap = LagSnapshot((
        PartitionLag("g", "t", 0, 3, 10, 7, oldest_unconsumed_at=1000.0),
        PartitionLag("g", "t", 1, 7, 7, 0, None),
        PartitionLag("g", "t", 2, None, 4, 4, None),  # lagging, time unknown
    ))
    registry = CollectorRegistry()
    sampler: BackgroundSampler[LagSnapshot] = BackgroundSampler(
        "consumer_lag", lambda: snap, interval_s=1, clock=lambda: 1030.0)
    sampler.run_once()
    registry.register(SampledCollector(sampler, lag_families, clock=lambda: 1030.0))
    got = _samples(registry)

    def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return name, tuple(sorted(labels.items()))

    assert got[key("kafka_consumergroup_lag", consumergroup="g", topic="t", partition="0")] == 7
    assert got[key("kafka_consumergroup_lag", consumergroup="g", topic="t", partition="2")] == 4
    assert got[key("kafka_consumergroup_lag_seconds", consumergroup="g", topic="t",
                   partition="0")] == 30.0  # scrape time − the record's timestamp
    assert got[key("kafka_consumergroup_lag_seconds", consumergroup="g", topic="t",
                   partition="1")] == 0.0
    # unknown age is left out, not reported as 0 (which would read as "caught up")
    assert key("kafka_consumergroup_lag_seconds", consumergroup="g", topic="t",
               partition="2") not in got
    assert got[key("kafka_consumergroup_group_topic_sum_lag", consumergroup="g", topic="t")] == 11
    assert got[key("kafka_consumergroup_current_offset", consumergroup="g", topic="t",
                   partition="0")] == 3
    assert got[key("kafka_topic_partition_current_offset", topic="t", partition="0")] == 10


def test_delay_tiers_export_how_far_past_its_release_the_head_is() -> None:
    # Records of a 60 s tier wait 60 s on purpose: 45 s of lag seconds is healthy
    # (overdue 0), 100 s means the head is 40 s late; a topic without a hold gets none.
    snap = LagSnapshot((
        PartitionLag("d", "tier-60", 0, 3, 10, 7, oldest_unconsumed_at=1000.0 - 15),
        PartitionLag("d", "tier-60", 1, 3, 10, 7, oldest_unconsumed_at=1000.0 - 70),
        PartitionLag("d", "tier-60", 2, 3, 3, 0, None),
        PartitionLag("g", "deliveries", 0, 3, 10, 7, oldest_unconsumed_at=1000.0 - 70),
    ))
    families = {f.name: {tuple(sorted(smp.labels.items())): smp.value for smp in f.samples}
                for f in lag_families(snap, 1030.0, {"tier-60": 60.0})}
    overdue = families["hookstream_delay_overdue_seconds"]

    def labels(group: str, topic: str, partition: int) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({"consumergroup": group, "topic": topic,
                             "partition": str(partition)}.items()))

    assert overdue == {labels("d", "tier-60", 0): 0.0, labels("d", "tier-60", 1): 40.0,
                       labels("d", "tier-60", 2): 0.0}


def test_a_scrape_never_waits_for_a_sample_in_progress() -> None:
    release = threading.Event()

    def slow_sample() -> LagSnapshot:
        release.wait(10)  # a broker that hangs
        return LagSnapshot(())

    sampler = BackgroundSampler("consumer_lag", slow_sample, interval_s=1).start()
    registry = CollectorRegistry()
    registry.register(SampledCollector(sampler, lag_families))
    registry.register(SamplerHealth([sampler]))
    try:
        started = time.monotonic()
        got = _samples(registry)
        # Waiting for the sample would take its 10 s; generous on purpose (shared cores).
        assert time.monotonic() - started < 2.0
        # nothing sampled yet: no lag series (not zeros), and the health says so
        assert not any(name.startswith("kafka_") for name, _ in got)
        assert got[("hookstream_sampler_last_success_timestamp_seconds",
                    (("sampler", "consumer_lag"),))] == 0.0
    finally:
        release.set()
        sampler.stop()


def test_stale_samples_are_dropped_and_failures_counted() -> None:
    now = [1000.0]
    calls = {"n": 0}

    def sample() -> LagSnapshot:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("broker gone")
        return LagSnapshot((PartitionLag("g", "t", 0, 0, 5, 5, 999.0),))

    sampler = BackgroundSampler("consumer_lag", sample, interval_s=5, max_age_s=30,
                                clock=lambda: now[0])
    registry = CollectorRegistry()
    registry.register(SampledCollector(sampler, lag_families, clock=lambda: now[0]))
    registry.register(SamplerHealth([sampler]))
    assert sampler.run_once()
    assert not sampler.run_once()
    now[0] += 10
    got = _samples(registry)
    assert got[("hookstream_sampler_errors_total", (("sampler", "consumer_lag"),))] == 1
    assert any(name == "kafka_consumergroup_lag" for name, _ in got)  # 10 s old: still fresh
    now[0] += 30
    got = _samples(registry)
    assert not any(name == "kafka_consumergroup_lag" for name, _ in got)


def _stats(worst: int) -> DeliveryStats:
    return DeliveryStats(
        pending={"new": KindStats(3, 12.0, 11.0), "retry": KindStats(1, 300.0, 0.0),
                 "held": KindStats(0, 0.0, 0.0)},
        in_flight=2, lease_expired=0,
        worst=tuple(EndpointStats(f"ep{i}", "acme", 1, 100.0 - i) for i in range(worst)),
        endpoints_overdue={10.0: 2, 60.0: 0, 600.0: 0}, dead=4,
        endpoints_by_status={"active": 5, "paused": 1, "disabled": 0}, circuits_open=1,
        circuits_failing=2, circuit_longest_open_s=50.0, window_s=900.0,
        automatic_attempts=30, manual_attempts=2, attempted_deliveries=20)


def test_delivery_families_label_only_the_endpoints_they_are_given() -> None:
    fams = {f.name: f for f in delivery_families(_stats(worst=3), 0.0)}
    assert {s.labels["endpoint"] for s in fams["hookstream_endpoint_oldest_pending_age_seconds"]
            .samples} == {"ep0", "ep1", "ep2"}
    # every other family has a fixed, small label set whatever the number of endpoints
    for name, fam in fams.items():
        if not name.startswith("hookstream_endpoint_"):
            assert len(fam.samples) <= 3, name
    (ratio,) = fams["hookstream_retry_amplification_ratio"].samples
    assert ratio.value == 1.5
    overdue = {s.labels["over_seconds"]: s.value
               for s in fams["hookstream_endpoints_overdue"].samples}
    assert overdue == {"10": 2, "60": 0, "600": 0}


WAITS = {("d", "deliveries"): 0.0, ("d-delay", "tier-60"): 60.0}


def test_oldest_waiting_task_counts_the_deliveries_backlog_and_tiers_past_their_hold() -> None:
    now = 1000.0
    snap = LagSnapshot((
        PartitionLag("d", "deliveries", 0, 3, 10, 7, oldest_unconsumed_at=now - 40),
        PartitionLag("d", "deliveries", 1, 3, 3, 0, None),
        PartitionLag("d-delay", "tier-60", 0, 3, 10, 7, oldest_unconsumed_at=now - 70),
        PartitionLag("f", "events", 0, 3, 10, 7, oldest_unconsumed_at=now - 500),  # not ours
    ))
    assert oldest_waiting_s(snap, WAITS, now) == 40.0
    # a tier's record 90 s past its 60 s hold is the oldest waiting task: 30 s
    later = LagSnapshot((*snap.partitions[1:3], PartitionLag(
        "d-delay", "tier-60", 1, 3, 10, 7, oldest_unconsumed_at=now - 150)))
    assert oldest_waiting_s(later, WAITS, now) == 90.0


def test_oldest_waiting_task_unknown_when_any_age_is_unknown_or_nothing_is_sampled() -> None:
    unknown = LagSnapshot((PartitionLag("d", "deliveries", 0, None, 4, 4, None),))
    assert oldest_waiting_s(unknown, WAITS, 1000.0) is None
    assert oldest_waiting_s(LagSnapshot(()), WAITS, 1000.0) is None


@given(st.lists(st.tuples(st.sampled_from([*sorted(WAITS), ("x", "y")]),
                          st.integers(0, 5), st.floats(0, 10_000)), max_size=12))
def test_oldest_waiting_task_is_never_negative_and_bounded_by_the_oldest_age(
        parts: list[tuple[tuple[str, str], int, float]]) -> None:
    now = 20_000.0
    snap = LagSnapshot(tuple(
        PartitionLag(g, t, i, 0, lag, lag, None if lag == 0 else now - age)
        for i, ((g, t), lag, age) in enumerate(parts)))
    waiting = oldest_waiting_s(snap, WAITS, now)
    ours = [(lag, age) for (key, lag, age) in parts if key in WAITS]
    if not ours:
        assert waiting is None
    else:
        assert waiting is not None and 0.0 <= waiting <= max(age for _, age in ours) + 1e-6
