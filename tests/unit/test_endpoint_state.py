"""The dispatcher's endpoint table: rows → scheduler limits, an answer → circuit and rate,
evictions as values, the no-progress check. A real (pure) scheduler, no I/O."""

from __future__ import annotations

import uuid

import pytest
from hookstream.dispatcher.endpoint_state import IDLE_EVICT_S, STUCK_DEFERRALS, EndpointState
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.policy.circuit import CircuitState
from hookstream.policy.classify import ErrorClass
from tests.unit.dispatcher_parts import POLICY, Parts, result, row, task

NOW = 1_700_000_000.0


def _known(parts: Parts, **kwargs: object) -> EndpointState:
    r = row(**kwargs)  # type: ignore[arg-type]
    parts.table.remember(r)
    ep = parts.table.get(r.id)
    assert ep is not None
    return ep


def _queue(parts: Parts, ep: EndpointState, n: int) -> None:
    for item in parts.read([task(ep.row.id) for _ in range(n)]):
        parts.sched.push(ep.row.id, item, parts.clock.now)


def test_a_remembered_row_becomes_a_lane_with_its_limits() -> None:
    parts = Parts()
    ep = _known(parts, cap=3)
    _queue(parts, ep, 5)
    taken = parts.sched.take(parts.clock.now, 10)
    assert len(taken) == 3  # its in-flight cap
    assert parts.table.to_reload({ep.row.id}) == []


def test_unknown_and_held_endpoints_are_read_again() -> None:
    parts = Parts()
    active, paused = _known(parts), _known(parts, status="paused")
    unknown = uuid.uuid4()
    assert sorted(parts.table.to_reload({active.row.id, paused.row.id, unknown})) == sorted(
        [paused.row.id, unknown])


def test_an_owners_change_resets_the_circuit_and_a_new_rate_the_adaptive_rate() -> None:
    parts = Parts()
    tripped = CircuitState(consecutive_failures=7, first_failure_at=NOW - 60)
    ep = _known(parts, circuit=tripped, version=1, rate=10.0)
    ep.circuit = CircuitState(consecutive_failures=9, first_failure_at=NOW - 60)
    ep.adaptive.on_throttled()
    same_version = row(endpoint_id=ep.row.id, version=1, rate=10.0, burst=20,
                       circuit=CircuitState())
    parts.table.remember(same_version)
    # The dispatcher's own circuit wins over a row it has not written yet...
    assert ep.circuit.consecutive_failures == 9 and ep.row.burst == 20
    assert ep.adaptive.effective < 10.0
    parts.table.remember(row(endpoint_id=ep.row.id, version=2, rate=20.0))
    # ...an owner's or operator's change (new config version) wins over the dispatcher's.
    assert ep.circuit == CircuitState()
    assert ep.adaptive.configured == ep.adaptive.effective == 20.0


def test_a_healthy_answer_changes_nothing() -> None:
    parts = Parts()
    ep = _known(parts)
    assert parts.table.feedback(ep, result(200, now=NOW), NOW) is None
    assert parts.table.take_changes() == ({}, {})


def test_observed_counts_served_attempts_and_smooths_latency() -> None:
    parts = Parts()
    ep = _known(parts)
    assert parts.table.observed(ep.row.id, 2000.0) is ep
    assert parts.table.observed(ep.row.id, 1000.0) is ep
    assert ep.served == 2 and ep.latency_s == pytest.approx(1.8)
    assert parts.table.observed(uuid.uuid4(), 10.0) is None  # forgotten meanwhile


def test_a_throttling_answer_lowers_the_rate_and_a_success_raises_it_again() -> None:
    parts = Parts()
    ep = _known(parts, rate=10.0)
    parts.table.feedback(ep, result(429, now=NOW, headers={"retry-after": "2"}), NOW)
    assert ep.adaptive.effective == pytest.approx(5.0)
    assert parts.sample("hookstream_dispatcher_throttled_total") == 1
    assert ep.circuit == CircuitState()  # 429 asks to slow down; it does not trip the circuit
    parts.table.feedback(ep, result(200, now=NOW), NOW)
    assert 5.0 < ep.adaptive.effective < 10.0


def test_failures_pause_the_endpoint_and_evict_its_queue_until_the_pause_ends() -> None:
    parts = Parts()
    ep = _known(parts)
    _queue(parts, ep, 4)
    evictions = [parts.table.feedback(ep, result(500, now=NOW), NOW)
                 for _ in range(POLICY.failure_threshold)]
    assert evictions[:-1] == [None] * (POLICY.failure_threshold - 1)
    eviction = evictions[-1]
    assert eviction is not None
    assert len(eviction.items) == 4 and parts.sched.queued_for(ep.row.id) == 0
    assert eviction.until == ep.circuit.paused_until == NOW + POLICY.base_pause_s
    circuits, disable = parts.table.take_changes()
    assert circuits == {ep.row.id: ep.circuit} and disable == {}
    assert parts.table.take_changes() == ({}, {})  # handed to the writer once
    assert parts.sample("hookstream_circuit_transitions_total", to="open") == 1


def test_a_success_while_probing_closes_the_circuit() -> None:
    parts = Parts()
    ep = _known(parts, cap=4, circuit=CircuitState(consecutive_failures=5,
                                                    first_failure_at=NOW - 100))
    parts.table.set_probing(ep, True)
    _queue(parts, ep, 6)
    assert len(parts.sched.take(parts.clock.now, 10)) == 1  # one request at a time
    assert parts.table.feedback(ep, result(200, now=NOW), NOW) is None
    assert not ep.probing and ep.circuit == CircuitState()
    assert parts.sample("hookstream_circuit_transitions_total", to="closed") == 1
    assert len(parts.sched.take(parts.clock.now, 10)) == 3  # its own cap again (4, 1 out)


@pytest.mark.parametrize(("answer", "reason"), [
    (result(410, now=NOW), "the endpoint answered 410 Gone"),
    (result(None, now=NOW, error=ErrorClass.CONNECT), "failing continuously since"),
])
def test_a_disabled_endpoint_drops_its_queue_and_says_why(answer: object,
                                                          reason: str) -> None:
    parts = Parts()
    ep = _known(parts, circuit=CircuitState(consecutive_failures=1,
                                             first_failure_at=NOW - POLICY.disable_after_s))
    _queue(parts, ep, 3)
    eviction = parts.table.feedback(ep, answer, NOW)  # type: ignore[arg-type]
    assert eviction is not None and eviction.until is None and len(eviction.items) == 3
    assert ep.row.status == "disabled"
    _, disable = parts.table.take_changes()
    assert disable[ep.row.id].startswith(reason)
    assert parts.table.to_reload({ep.row.id}) == [ep.row.id]  # read again before serving


def test_an_endpoint_deferred_without_being_served_is_reported_once_per_period() -> None:
    parts = Parts()
    stuck, busy = _known(parts), _known(parts)
    stuck.deferred = busy.deferred = STUCK_DEFERRALS
    busy.served = 1
    assert parts.table.check_progress() == 1
    assert parts.sample("hookstream_dispatcher_stuck_endpoints") == 1
    assert stuck.deferred == stuck.served == busy.deferred == 0
    assert parts.table.check_progress() == 0


def test_idle_endpoints_are_forgotten_and_busy_ones_kept() -> None:
    parts = Parts()
    idle, busy = _known(parts), _known(parts)
    _queue(parts, busy, 1)
    parts.clock.now += IDLE_EVICT_S + 1
    parts.table.evict_idle()
    assert parts.table.get(idle.row.id) is None
    assert parts.table.get(busy.row.id) is busy


def test_only_the_busiest_endpoints_get_an_in_flight_series() -> None:
    parts = Parts()
    eps = [_known(parts, cap=20, burst=20) for _ in range(15)]
    for n, ep in enumerate(eps):
        _queue(parts, ep, n)
    parts.sched.take(parts.clock.now, 1000)
    parts.table.export_worst()
    series = [s for m in parts.registry.collect()
              if m.name == "hookstream_dispatcher_endpoint_in_flight" for s in m.samples]
    assert sorted(int(s.value) for s in series) == list(range(5, 15))


statuses = st.sampled_from([200, 201, 204, 408, 410, 413, 429, 500, 502, 503, 400, None])


@settings(max_examples=200, deadline=None)
@given(answers=st.lists(st.tuples(statuses, st.floats(min_value=0, max_value=120)),
                        max_size=40),
       queued=st.integers(min_value=0, max_value=20))
def test_whatever_the_answers_no_task_is_lost_or_duplicated(
        answers: list[tuple[int | None, float]], queued: int) -> None:
    # Every queued task is either still in the scheduler or in exactly one eviction.
    parts = Parts()
    ep = _known(parts, cap=50)
    _queue(parts, ep, queued)
    evicted = []
    now = NOW
    for status, elapsed in answers:
        now += elapsed
        error = ErrorClass.TIMEOUT if status is None else None
        eviction = parts.table.feedback(ep, result(status, now=now, error=error), now)
        if eviction is not None:
            evicted += eviction.items
            if eviction.until is not None:
                assert eviction.until >= now  # never deferred into the past
    assert len(evicted) + parts.sched.queued_for(ep.row.id) == queued
    assert len({id(i) for i in evicted}) == len(evicted)
