"""LoopHistogram renders exactly what prometheus_client's Histogram renders."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from hookstream.ops.loop_metrics import LoopCounter, LoopHistogram

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


@given(st.lists(st.one_of(st.floats(-1, 100, allow_nan=False), st.sampled_from(BUCKETS)),
                max_size=200))
def test_same_exposition_as_prometheus_client(values: list[float]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = LoopHistogram("x_seconds", "doc", BUCKETS, ours)
    ref = Histogram("x_seconds", "doc", buckets=BUCKETS, registry=theirs)
    for v in values:
        fast.observe(v)
        ref.observe(v)
    # prometheus_client adds a _created sample; everything else must match line for line.
    def lines(registry: CollectorRegistry) -> list[str]:
        return [line for line in generate_latest(registry).decode().splitlines()
                if "_created" not in line]
    assert lines(ours) == lines(theirs)


def test_bad_buckets_are_refused() -> None:
    with pytest.raises(ValueError):
        LoopHistogram("y", "doc", [], CollectorRegistry())
    with pytest.raises(ValueError):
        LoopHistogram("z", "doc", [1, 1], CollectorRegistry())


@given(st.lists(st.tuples(st.sampled_from(["delivered", "retry", "dead"]),
                          st.sampled_from(["2xx", "5xx", "timeout"])), max_size=100))
def test_counter_same_exposition_as_prometheus_client(incs: list[tuple[str, str]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = LoopCounter("a_total", "doc", ["outcome", "status_class"], ours)
    ref = Counter("a_total", "doc", ["outcome", "status_class"], registry=theirs)
    for labels in incs:
        fast.inc(*labels)
        ref.labels(*labels).inc()

    def samples(registry: CollectorRegistry) -> list[tuple[str, list[tuple[str, str]], float]]:
        return sorted((s.name, sorted(s.labels.items()), s.value) for m in registry.collect()
                      for s in m.samples if not s.name.endswith("_created"))
    assert samples(ours) == samples(theirs)


def test_counter_refuses_wrong_label_count() -> None:
    with pytest.raises(ValueError):
        LoopCounter("b_total", "doc", ["x"], CollectorRegistry()).inc("1", "2")
