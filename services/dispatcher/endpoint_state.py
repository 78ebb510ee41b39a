"""What the dispatcher knows of each endpoint it serves, and how answers change it.

* ``remember``: an endpoint row (read at intake or by the refresh) becomes the lane's
  limits in the scheduler; an owner's change (config version) resets the circuit.
* ``feedback``: an attempt's answer shapes what the endpoint gets next — adaptive rate
  on 429/503, Retry-After, the circuit (pause, probe, close, disable). When the circuit
  pauses or disables the endpoint its queued tasks leave memory: returned as an
  ``Eviction`` value for the backlog to defer or drop.
* ``take_changes``: circuit states and disablements decided since the last batch, for
  the outcome writer (written in the same transaction as the outcomes).
* ``refresh_forever``: owners' changes (rate, cap, pause, re-enable) reach the
  scheduler within a few seconds; unused state is forgotten; an endpoint deferred
  without being served is reported.

No Kafka, no HTTP: the scheduler is pure and the only I/O is the refresh's read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from hookstream.dispatcher.attempt import AttemptResult
from hookstream.dispatcher.decide import circuit_after, is_throttle
from hookstream.dispatcher.metrics import WORST_N, DispatcherMetrics
from hookstream.dispatcher.offset_book import Item
from hookstream.dispatcher.outcomes import EndpointChanges
from hookstream.dispatcher.store import EndpointRow, Store

from hookstream.io.pg import DatabaseUnavailable
from hookstream.policy.backlog import smoothed_latency
from hookstream.policy.circuit import (
    Admission,
    CircuitPolicy,
    CircuitState,
    Verdict,
    admission,
)
from hookstream.policy.classify import Outcome
from hookstream.policy.scheduler import FairScheduler, Limits
from hookstream.policy.token_bucket import AdaptiveRate

log = logging.getLogger("hookstream.dispatcher")
# Lanes and endpoint states unused this long are forgotten: memory stays bounded by the
# endpoints that are active, not by every endpoint ever seen.
IDLE_EVICT_S = 600.0
# Deferrals in one refresh period with nothing served that mark an endpoint as stuck.
STUCK_DEFERRALS = 1000
LOAD_BATCH = 1000
CLEAN_CIRCUIT = CircuitState()


@dataclass(slots=True)
class EndpointState:
    row: EndpointRow
    circuit: CircuitState
    adaptive: AdaptiveRate
    probing: bool = False
    last_used: float = 0.0
    # Backlog deferral: the next free slot of this endpoint's drain schedule (epoch s), so
    # every deferred task is due after the ones deferred before it and a task coming back
    # is not deferred again behind newer ones (the loop without progress of issue #12).
    defer_cursor: float = 0.0
    # The drain rate that schedule was planned at (0: none planned by this process), so a
    # faster endpoint's parked backlog is pulled forward (backlog.catch_up).
    planned_rate: float = 0.0
    latency_s: float = 0.0  # moving average of its attempts: it drains at cap ÷ latency
    # Whether rows of this endpoint may be parked in PostgreSQL: unknown (True) until a
    # refill found none, since an earlier process or a rebalanced member may have parked
    # some; True again whenever this process parks one (backlog.refill).
    parked_maybe: bool = True
    deferred: int = 0  # since the last refresh, for the no-progress check
    served: int = 0


@dataclass(slots=True)
class Eviction:
    """An endpoint's queued tasks, out of the scheduler because its circuit paused it
    (defer them until ``until``) or disabled it (``until`` None: drop them, the rows stay
    pending and are sent when it is enabled again)."""

    items: list[Item]
    until: float | None


def _adaptive(row: EndpointRow) -> AdaptiveRate:
    return AdaptiveRate(row.rate_per_s, max(row.rate_per_s / 16, 0.05))


class EndpointTable:
    def __init__(self, *, sched: FairScheduler[uuid.UUID, Item], policy: CircuitPolicy,
                 metrics: DispatcherMetrics, refresh_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self._sched, self._policy, self._metrics = sched, policy, metrics
        self._refresh_s, self._clock = refresh_s, clock
        self._states: dict[uuid.UUID, EndpointState] = {}
        self._dirty_circuits: dict[uuid.UUID, CircuitState] = {}
        self._disable: dict[uuid.UUID, str] = {}

    def get(self, endpoint_id: uuid.UUID) -> EndpointState | None:
        return self._states.get(endpoint_id)

    def __len__(self) -> int:
        return len(self._states)

    def to_reload(self, ids: set[uuid.UUID]) -> list[uuid.UUID]:
        """Unknown endpoints, and held ones (paused or disabled: their tasks are dropped),
        are read afresh, so a task produced after a resume never meets a stale "held"."""
        states = self._states
        return [k for k in ids if k not in states or states[k].row.status != "active"]

    def remember(self, row: EndpointRow) -> None:
        ep = self._states.get(row.id)
        if ep is None:
            ep = EndpointState(row=row, circuit=row.circuit, adaptive=_adaptive(row),
                               last_used=self._clock())
            self._states[row.id] = ep
        elif row != ep.row:
            if row.config_version != ep.row.config_version:
                # Changed by its owner or an operator (re-enabled, reset): their circuit wins.
                ep.circuit = row.circuit
            if row.rate_per_s != ep.row.rate_per_s:
                ep.adaptive = _adaptive(row)
            ep.row = row
        cap = 1 if ep.probing else row.max_in_flight
        self._sched.set_endpoint(row.id, row.tenant,
                                 Limits(ep.adaptive.effective, row.burst, cap), self._clock())

    def admit(self, ep: EndpointState, now: float) -> Admission:
        """What its circuit lets through now: nothing while paused (OPEN: its tasks wait
        for the pause to end), after a pause a probe only (PROBING), else everything."""
        adm = admission(self._policy, ep.circuit, now)
        if adm is not Admission.OPEN:
            self.set_probing(ep, adm is Admission.PROBING)
        return adm

    def set_probing(self, ep: EndpointState, probing: bool) -> None:
        # After a pause only a probe's worth of traffic: one request at a time until one
        # succeeds, then the endpoint's own limits again.
        if ep.probing == probing:
            return
        ep.probing = probing
        cap = 1 if probing else ep.row.max_in_flight
        self._sched.set_endpoint(ep.row.id, ep.row.tenant,
                                 Limits(ep.adaptive.effective, ep.row.burst, cap), self._clock())

    # -- an attempt's answer ------------------------------------------------------------
    def observed(self, endpoint_id: uuid.UUID, latency_ms: float) -> EndpointState | None:
        """Count one served attempt and its latency (None: the endpoint is forgotten)."""
        ep = self._states.get(endpoint_id)
        if ep is not None:
            ep.served += 1
            ep.latency_s = smoothed_latency(ep.latency_s, latency_ms / 1000.0)
        return ep

    def feedback(self, ep: EndpointState, result: AttemptResult, now: float) -> Eviction | None:
        """Circuit and adaptive rate: the endpoint's answer shapes what it gets next."""
        decision = result.decision
        if (decision.outcome is Outcome.DELIVERED and not ep.probing
                and ep.circuit == CLEAN_CIRCUIT
                and ep.adaptive.effective >= ep.adaptive.configured):
            return None  # the common case: a healthy endpoint answered 2xx, nothing changes
        endpoint_id, sched, metrics = ep.row.id, self._sched, self._metrics
        now_m = self._clock()
        if is_throttle(result.status_code):
            metrics.throttled.inc()
            sched.set_rate(endpoint_id, ep.adaptive.on_throttled(), now_m)
            if decision.retry_after_s:
                sched.hold(endpoint_id, now_m + min(decision.retry_after_s, 60.0))
        elif (decision.outcome is Outcome.DELIVERED
              and ep.adaptive.effective < ep.adaptive.configured):
            sched.set_rate(endpoint_id, ep.adaptive.on_success(), now_m)
        circuit, verdict = circuit_after(decision, result.status_code, ep.circuit,
                                         self._policy, now)
        if circuit != ep.circuit:
            ep.circuit = circuit
            self._dirty_circuits[endpoint_id] = circuit
        if decision.outcome is Outcome.DELIVERED and ep.probing:
            self.set_probing(ep, False)
            metrics.circuit.labels("closed").inc()
        if decision.outcome is Outcome.DISABLE:
            verdict = Verdict.DISABLE
        if verdict is Verdict.DISABLE:
            if decision.outcome is Outcome.DISABLE:
                reason = "the endpoint answered 410 Gone"
            else:
                since = datetime.fromtimestamp(circuit.first_failure_at or now, UTC)
                reason = f"failing continuously since {since:%Y-%m-%d %H:%M}Z"
            ep.row = dataclasses.replace(ep.row, status="disabled")
            self._disable[endpoint_id] = reason
            metrics.circuit.labels("disabled").inc()
            log.warning("endpoint disabled", extra={"endpoint": str(endpoint_id), "reason": reason})
            return Eviction(sched.pop_excess(endpoint_id, 0), None)
        if verdict is Verdict.PAUSE:
            assert circuit.paused_until is not None
            sched.hold(endpoint_id, now_m + (circuit.paused_until - now))
            metrics.circuit.labels("open").inc()
            log.warning("endpoint circuit opened", extra={
                "endpoint": str(endpoint_id), "failures": circuit.consecutive_failures,
                "paused_for_s": round(circuit.paused_until - now, 1)})
            return Eviction(sched.pop_excess(endpoint_id, 0), circuit.paused_until or now)
        return None

    def take_changes(self) -> EndpointChanges:
        """Circuit states and disablements decided since the last batch, for the writer."""
        circuits, self._dirty_circuits = self._dirty_circuits, {}
        disable, self._disable = self._disable, {}
        return circuits, disable

    # -- refresh ---------------------------------------------------------------------------
    async def refresh_forever(self, store: Store,
                              fail: Callable[[str, BaseException], None]) -> None:
        """Endpoint settings changed by their owners (rate, cap, pause, re-enable) reach
        the scheduler within a few seconds; unused state is forgotten."""
        while True:
            await asyncio.sleep(self._refresh_s)
            self.evict_idle()
            ids = list(self._states)
            try:
                for i in range(0, len(ids), LOAD_BATCH):
                    for row in await store.load_endpoints(ids[i:i + LOAD_BATCH]):
                        self.remember(row)
            except DatabaseUnavailable as exc:
                fail("database", exc)
            self.export_worst()
            self.check_progress()

    def evict_idle(self) -> None:
        now_m = self._clock()
        self._sched.evict_idle(now_m, IDLE_EVICT_S)
        for key in [k for k, ep in self._states.items()
                    if now_m - ep.last_used > IDLE_EVICT_S and not self._sched.has_endpoint(k)]:
            del self._states[key]

    def export_worst(self) -> None:
        # Bounded cardinality: only the busiest few endpoints get a series.
        busiest = sorted(((self._sched.in_flight_for(k), k) for k in self._states),
                         reverse=True)[:WORST_N]
        self._metrics.endpoint_in_flight.clear()
        for n, key in busiest:
            if n:
                self._metrics.endpoint_in_flight.labels(str(key)).set(n)

    def check_progress(self) -> int:
        """An endpoint whose tasks keep being deferred while none is served is a bug of
        this dispatcher, never a silent storm: counted and named. Returns the count."""
        stuck = 0
        for key, ep in self._states.items():
            if ep.deferred >= STUCK_DEFERRALS and ep.served == 0:
                stuck += 1
                log.error("endpoint deferred without being served", extra={
                    "endpoint": str(key), "deferred": ep.deferred,
                    "queued": self._sched.queued_for(key)})
            ep.deferred = ep.served = 0
        self._metrics.stuck.set(stuck)
        return stuck
