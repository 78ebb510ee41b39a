"""The host speed yardstick's arithmetic (benchmarks/host_speed.py), with a fake clock.

How fast the host is cannot be tested; what the benchmark reports from the timings can.
"""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import host_speed

timings = st.lists(st.floats(min_value=0.001, max_value=10.0), min_size=1, max_size=50)


def test_measure_reports_the_median_repetition_after_an_untimed_warm_up():
    # Repetitions of 10, 40 and 20 ms: the clock advances by each in turn.
    ticks = itertools.accumulate([0.0, 0.010, 0.0, 0.040, 0.0, 0.020])
    calls = []
    assert host_speed.measure(3, clock=lambda: next(ticks),
                              work=lambda: calls.append(1)) == 20.0
    assert len(calls) == 4  # the warm-up, then the three timed ones


def test_a_unit_does_its_whole_work():
    # Every event contributes: more events, a larger result.
    assert host_speed.unit(20) > host_speed.unit(10) > 0


@given(timings)
def test_the_median_lies_within_the_timings(ts):
    ms = host_speed.median_ms(ts)
    assert round(1000 * min(ts), 2) <= ms <= round(1000 * max(ts), 2)


def test_no_timings_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="no repetitions"):
        host_speed.median_ms([])


@given(st.lists(st.floats(min_value=1.0, max_value=100.0), min_size=1, max_size=200))
def test_the_spread_is_ordered_and_counts_every_sample(samples):
    s = host_speed.spread(samples)
    assert s["samples"] == len(samples)
    assert round(min(samples), 2) <= s["p10"] <= s["p50"] <= s["p90"] <= round(max(samples), 2)


def test_the_spread_of_nothing_says_so():
    assert host_speed.spread([]) == {"samples": 0}


def test_the_spread_of_known_samples():
    s = host_speed.spread([float(x) for x in range(1, 12)])  # 1 … 11
    assert (s["p10"], s["p50"], s["p90"]) == (2.0, 6.0, 10.0)


def test_cpu_in_host_units_is_the_same_on_a_twice_as_slow_host():
    # The same work costs twice the milliseconds on a host twice as slow: in units of the
    # yardstick measured on each, it is the same figure.
    assert host_speed.in_units(0.4, 20.0) == host_speed.in_units(0.8, 40.0) == 0.02
    with pytest.raises(ValueError):
        host_speed.in_units(0.4, 0.0)


def test_the_sampler_times_pieces_until_stopped():
    sampler = host_speed.Sampler(every_s=0.01, events=20)
    sampler.start()
    # A sampler that records nothing fails here within seconds, not at pytest's timeout.
    deadline = time.monotonic() + 10
    while len(sampler.samples_ms) < 3 and sampler.is_alive() and time.monotonic() < deadline:
        sampler.join(0.01)
    s = sampler.stop()
    assert not sampler.is_alive()
    assert s["samples"] >= 3 and s["p50"] > 0


def test_a_loopback_unit_exchanges_every_message_whole():
    # Each round trip carries the request one way and the answer back, over a real TCP
    # connection on 127.0.0.1 (the host's loopback is what this yardstick measures).
    pair = host_speed.Loopback()
    try:
        assert pair.round_trips(3) == 3 * (600 + 150)
        assert pair.round_trips(0) == 0
    finally:
        pair.close()


def test_a_loopback_closed_mid_exchange_is_an_error_not_a_short_count():
    pair = host_speed.Loopback()
    pair.client.sendall(b"r" * 100)  # a sixth of a request, then the other end hangs up
    pair.client.close()
    with pytest.raises(ConnectionError, match="closed mid-exchange"):
        host_speed._receive(pair.server, 600)
    pair.server.close()


def test_the_loopback_yardstick_is_timed_in_cpu_milliseconds():
    assert host_speed.measure_loopback(repetitions=2) > 0


def test_the_sampler_times_the_loopback_beside_the_cpu_unit():
    sampler = host_speed.Sampler(every_s=0.01, events=20, round_trips=10)
    sampler.start()
    deadline = time.monotonic() + 10
    while len(sampler.loopback_samples_ms) < 3 and sampler.is_alive() \
            and time.monotonic() < deadline:
        sampler.join(0.01)
    sampler.stop()
    lo = sampler.loopback_spread()
    assert lo["samples"] == len(sampler.samples_ms) >= 3 and lo["p50"] > 0
