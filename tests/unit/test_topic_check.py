"""Existing topics against the settings (hookstream.core.topic_check) and the specs the
settings make (hookstream.core.topics, hookstream.cli.provision)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.cli import main as cli_main
from hookstream.cli.provision import topic_specs
from hookstream.core.settings import CommonSettings, SettingsError, from_env
from hookstream.core.topic_check import (
    MIN_ISR,
    Mismatch,
    ObservedTopic,
    check_existing,
    mismatches,
)
from hookstream.core.topics import Topics, TopicSpec


def spec(partitions: int = 6, rf: int = 3, isr: int | None = 2) -> TopicSpec:
    config = {} if isr is None else {MIN_ISR: str(isr)}
    return TopicSpec("hs.events", partitions, config, rf)


def seen(replicas: tuple[int, ...], isr: int | None = 2) -> ObservedTopic:
    return ObservedTopic("hs.events", replicas, isr)


def test_a_topic_as_the_settings_want_has_no_mismatch() -> None:
    assert mismatches(spec(), seen((3,) * 6)) == []


@pytest.mark.parametrize(("observed", "expected"), [
    (seen((3,) * 3), [Mismatch("hs.events", "partitions", "3", 6)]),
    (seen((1,) * 6, isr=1), [Mismatch("hs.events", "replication factor", "1", 3),
                             Mismatch("hs.events", MIN_ISR, "1", 2)]),
    (seen((3, 3, 2, 3, 2, 3)),
     [Mismatch("hs.events", "replication factor", "2 (partitions 2,4), 3 (partitions "
                                                   "0,1,3,5)", 3)]),
    (seen((3,) * 6, isr=None), [Mismatch("hs.events", MIN_ISR, "unknown", 2)]),
])
def test_each_difference_is_named(observed: ObservedTopic, expected: list[Mismatch]) -> None:
    assert mismatches(spec(), observed) == expected


def test_the_line_says_what_was_found_and_what_is_wanted() -> None:
    (m,) = mismatches(spec(), seen((3,) * 3))
    assert m.line() == "hs.events: partitions is 3, the settings want 6"


def test_a_spec_without_min_isr_does_not_check_it() -> None:
    assert mismatches(spec(isr=None), seen((3,) * 6, isr=1)) == []


def test_only_observed_topics_are_checked() -> None:
    specs = [spec(), TopicSpec("hs.dead", 1, {MIN_ISR: "2"}, 3)]
    assert check_existing(specs, {}) == []
    assert [m.topic for m in check_existing(specs, {"hs.dead": ObservedTopic(
        "hs.dead", (1,), 1)})] == ["hs.dead", "hs.dead"]


layouts = st.tuples(st.integers(1, 12), st.integers(1, 5), st.integers(1, 5))


@given(layouts, st.lists(st.integers(1, 5), min_size=1, max_size=12), st.integers(1, 5))
def test_a_mismatch_is_reported_exactly_when_something_differs(
        wanted: tuple[int, int, int], replicas: list[int], isr: int) -> None:
    partitions, rf, min_isr = wanted
    found = {m.what for m in mismatches(spec(partitions, rf, min_isr), seen(tuple(replicas), isr))}
    assert ("partitions" in found) == (len(replicas) != partitions)
    assert ("replication factor" in found) == any(r != rf for r in replicas)
    assert (MIN_ISR in found) == (isr != min_isr)


@given(layouts)
def test_every_spec_is_replicated_as_asked(layout: tuple[int, int, int]) -> None:
    partitions, rf, isr = layout
    if isr > rf:
        with pytest.raises(ValueError, match="exceeds the replication factor"):
            Topics("hs").specs(partitions, rf, isr)
        return
    specs = Topics("hs").specs(partitions, rf, isr)
    assert all(s.replication_factor == rf and s.config[MIN_ISR] == str(isr) for s in specs)
    assert {s.partitions for s in specs if not s.name.endswith(".dead")} == {partitions}
    # and what was just made from the settings matches itself
    observed = {s.name: ObservedTopic(s.name, (rf,) * s.partitions, isr) for s in specs}
    assert check_existing(specs, observed) == []


def test_the_settings_make_the_specs() -> None:
    settings = from_env(CommonSettings, {"HOOKSTREAM_TOPIC_PARTITIONS": "12",
                                         "HOOKSTREAM_TOPIC_REPLICATION_FACTOR": "3",
                                         "HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS": "2"})
    events = topic_specs(settings)[0]
    assert (events.partitions, events.replication_factor, events.config[MIN_ISR]) == (12, 3, "2")
    assert topic_specs(settings, partitions=4)[0].partitions == 4


def test_the_defaults_fit_one_broker() -> None:
    s = from_env(CommonSettings, {})
    assert (s.topic_partitions, s.topic_replication_factor, s.topic_min_insync_replicas) == \
        (6, 1, 1)


@pytest.mark.parametrize(("env", "message"), [
    ({"HOOKSTREAM_TOPIC_PARTITIONS": "0"}, "HOOKSTREAM_TOPIC_PARTITIONS='0' is invalid"),
    ({"HOOKSTREAM_TOPIC_REPLICATION_FACTOR": "0"}, "HOOKSTREAM_TOPIC_REPLICATION_FACTOR"),
    ({"HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS": "2"},
     "HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS must not exceed HOOKSTREAM_TOPIC_REPLICATION_FACTOR"),
])
def test_a_layout_kafka_could_not_serve_is_refused_at_start(
        env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        from_env(CommonSettings, env)


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_partitions_zero_is_refused_on_the_command_line(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["topics", "--partitions", value]) == 2
    err = capsys.readouterr().err
    assert "--partitions" in err and ("must be 1..10000" in err or "whole number" in err), err
