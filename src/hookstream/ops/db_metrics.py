"""Platform-wide delivery gauges read from PostgreSQL (queries in sql/observability.sql,
run by ``hookstream.ops.metrics_store``).

Sampled on a background thread of ONE service, the fanout (see ``runner``): these
numbers are how an operator sees that the dispatchers are stuck or missing, so they
must not come from the dispatchers themselves (a dead dispatcher exports nothing, and
"oldest pending age" would vanish instead of growing). They describe the whole
database, not the process: with several fanout replicas, query ``max without
(instance)``.

Cardinality is bounded by construction: fixed label values, and an ``endpoint`` label
only on tracked endpoints (``hookstream.core.endpoint_series``): the worst ``top_n`` of the
held and of the not-held pools by oldest pending age, kept (at 0 once healthy) for an
hour after they left the list, at most ``2 × top_n`` per pool. The fleet-wide
distribution (``hookstream_endpoints_overdue{over_seconds}``) covers every endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from psycopg.rows import dict_row

from hookstream.core.counts import COUNT_CAP
from hookstream.core.endpoint_series import EndpointTracker, Ranked
from hookstream.core.window_totals import Slice, WindowTotals
from hookstream.io.pg import NETWORK_BOUNDS, DatabaseUnavailable
from hookstream.ops import metrics_store as store
from hookstream.ops.sampling import BackgroundSampler, SampledCollector

# Due work older than these (s) counts an endpoint as behind; 10 s is the first-attempt SLO.
OVERDUE_THRESHOLDS_S: tuple[float, ...] = (10.0, 60.0, 600.0, 3600.0)
DEFAULT_TOP_N = 10


@dataclass(frozen=True)
class KindStats:
    rows: int
    oldest_age_s: float
    most_overdue_s: float


@dataclass(frozen=True)
class EndpointStats:
    endpoint: str
    tenant: str
    pending: int
    oldest_age_s: float
    held: bool = False  # paused, disabled or circuit open


@dataclass(frozen=True)
class DeliveryStats:
    pending: dict[str, KindStats]  # "new" / "retry" / "held" (see pending_by_kind)
    in_flight: int
    lease_expired: int
    worst: tuple[EndpointStats, ...]  # the tracked endpoints (see endpoint_series)
    endpoints_overdue: dict[float, int]  # threshold s → endpoints
    dead: int  # capped at COUNT_CAP (hookstream.core.counts)
    endpoints_by_status: dict[str, int]
    circuits_open: int
    circuits_failing: int
    circuit_longest_open_s: float
    window_s: float
    automatic_attempts: int
    manual_attempts: int
    attempted_deliveries: int
    dead_in_window: int = 0  # went dead within the window: exact, window-bounded

    @property
    def retry_amplification(self) -> float:
        # No attempts in the window: nothing was amplified; 0 tells "no data" apart from 1.0.
        if self.attempted_deliveries == 0:
            return 0.0
        return self.automatic_attempts / self.attempted_deliveries


def _fmt(threshold_s: float) -> str:
    return f"{threshold_s:g}"


def delivery_families(stats: DeliveryStats, _now: float) -> Iterator[Metric]:
    pending = GaugeMetricFamily(
        "hookstream_deliveries_pending",
        "Deliveries waiting for an attempt: new, retry, or held by their endpoint",
        labels=["kind"])
    oldest = GaugeMetricFamily(
        "hookstream_deliveries_oldest_pending_age_seconds",
        "Age (since created) of the oldest delivery waiting for an attempt", labels=["kind"])
    overdue = GaugeMetricFamily(
        "hookstream_deliveries_most_overdue_seconds",
        "How long the most overdue due delivery has been waiting past its due time",
        labels=["kind"])
    for kind, k in sorted(stats.pending.items()):
        pending.add_metric([kind], float(k.rows))
        oldest.add_metric([kind], k.oldest_age_s)
        overdue.add_metric([kind], k.most_overdue_s)
    yield from (pending, oldest, overdue)

    in_flight = GaugeMetricFamily(
        "hookstream_deliveries_in_flight", "Deliveries claimed by a dispatcher right now",
        value=float(stats.in_flight))
    expired = GaugeMetricFamily(
        "hookstream_deliveries_lease_expired",
        "In-flight deliveries whose lease expired (worker lost, not reaped yet)",
        value=float(stats.lease_expired))
    yield from (in_flight, expired)

    ep_labels = ["endpoint", "tenant"]
    worst_age = GaugeMetricFamily(
        "hookstream_endpoint_oldest_pending_age_seconds",
        "Oldest waiting delivery of the tracked endpoints (the worst N held and N not held,"
        " kept at 0 for an hour after they recover)", labels=ep_labels)
    worst_rows = GaugeMetricFamily(
        "hookstream_endpoint_pending",
        "Deliveries waiting for the tracked endpoints", labels=ep_labels)
    held = GaugeMetricFamily(
        "hookstream_endpoint_held",
        "1 when a tracked endpoint holds its work (paused, disabled or circuit open)",
        labels=ep_labels)
    for w in stats.worst:
        worst_age.add_metric([w.endpoint, w.tenant], w.oldest_age_s)
        worst_rows.add_metric([w.endpoint, w.tenant], float(w.pending))
        held.add_metric([w.endpoint, w.tenant], 1.0 if w.held else 0.0)
    yield from (worst_age, worst_rows, held)

    behind = GaugeMetricFamily(
        "hookstream_endpoints_overdue",
        "Endpoints whose due work has waited longer than over_seconds", labels=["over_seconds"])
    for threshold, n in sorted(stats.endpoints_overdue.items()):
        behind.add_metric([_fmt(threshold)], float(n))
    yield behind

    yield GaugeMetricFamily(
        "hookstream_deliveries_dead",
        f"Deliveries that gave up (status dead); counted up to {COUNT_CAP}, which then means "
        "at least that many", value=float(stats.dead))
    yield GaugeMetricFamily(
        "hookstream_deliveries_dead_in_window",
        "Deliveries that gave up (status dead) within the window, still dead",
        value=float(stats.dead_in_window))

    by_status = GaugeMetricFamily(
        "hookstream_endpoints", "Endpoints by configured status", labels=["status"])
    for status, n in sorted(stats.endpoints_by_status.items()):
        by_status.add_metric([status], float(n))
    circuits = GaugeMetricFamily(
        "hookstream_endpoint_circuits",
        "Active endpoints by circuit state: open (pausing) or failing (closed/probing with "
        "consecutive failures)", labels=["state"])
    circuits.add_metric(["open"], float(stats.circuits_open))
    circuits.add_metric(["failing"], float(stats.circuits_failing))
    longest = GaugeMetricFamily(
        "hookstream_endpoint_circuit_longest_open_seconds",
        "Among open circuits, how long the longest-failing endpoint has been failing",
        value=stats.circuit_longest_open_s)
    yield from (by_status, circuits, longest)

    window = GaugeMetricFamily(
        "hookstream_stats_window_seconds", "Window of the *_in_window gauges",
        value=stats.window_s)
    attempts = GaugeMetricFamily(
        "hookstream_attempts_in_window",
        "Attempts started within the window; manual=\"true\" are replays", labels=["manual"])
    attempts.add_metric(["false"], float(stats.automatic_attempts))
    attempts.add_metric(["true"], float(stats.manual_attempts))
    attempted = GaugeMetricFamily(
        "hookstream_deliveries_attempted_in_window",
        "Deliveries whose first automatic attempt was within the window",
        value=float(stats.attempted_deliveries))
    amplification = GaugeMetricFamily(
        "hookstream_retry_amplification_ratio",
        "Automatic attempts per delivery first attempted within the window (1 = no "
        "retries; 0 = no attempts)", value=stats.retry_amplification)
    yield from (window, attempts, attempted, amplification)


class DeliveryStatsSource:
    """Runs the gauges' queries (metrics_store) on one long-lived connection, reconnecting
    after failures."""

    def __init__(self, database_url: str, *, top_n: int = DEFAULT_TOP_N, window_s: float = 900.0,
                 statement_timeout_ms: int = 5000, clock: Callable[[], float] = time.time,
                 settle_s: float = 2.0) -> None:
        self.database_url = database_url
        self.top_n = top_n
        self.tracker = EndpointTracker(slots=top_n)
        self._clock = clock
        self.window_s = window_s
        # The attempts window is summed from slices, each read once (window_totals.py).
        self._attempts = WindowTotals()
        self.settle_s = settle_s
        self.statement_timeout_ms = statement_timeout_ms
        self._conn: psycopg.Connection[dict[str, Any]] | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> psycopg.Connection[dict[str, Any]]:
        if self._conn is None or self._conn.closed:
            # A statement timeout: a slow sample must never hold locks or a backend long.
            self._conn = psycopg.connect(
                self.database_url, row_factory=dict_row, **NETWORK_BOUNDS,
                application_name="hookstream-db-metrics", autocommit=True,
                options=f"-c statement_timeout={self.statement_timeout_ms}")
        return self._conn

    def sample(self) -> DeliveryStats:
        try:
            return self._sample()
        except psycopg.Error as exc:
            self.close()  # start the next round on a fresh connection
            raise DatabaseUnavailable(f"delivery stats failed: {exc}") from exc

    def _sample(self) -> DeliveryStats:
        conn = self._connection()
        # One read-only snapshot: pending counts, worst endpoints, etc. agree.
        with conn.transaction():
            store.snapshot(conn)
            pending = {r["kind"]: KindStats(r["rows"], r["oldest_age_s"], r["most_overdue_s"])
                       for r in store.pending_by_kind(conn)}
            flight = store.in_flight(conn)
            worst = self._tracked(conn)
            overdue = {r["over_s"]: r["endpoints"]
                       for r in store.endpoints_overdue(conn, OVERDUE_THRESHOLDS_S)}
            dead = store.dead(conn, cap=COUNT_CAP, window_s=self.window_s)
            statuses = {r["status"]: r["endpoints"] for r in store.endpoints_by_status(conn)}
            circuits = store.circuits(conn)
            window = store.attempts_slice(conn, after=self._attempts.upto,
                                          window_s=self.window_s, settle_s=self.settle_s)
        assert flight and dead and circuits and window  # aggregates always return a row
        self._attempts.add(Slice(window["upto"], window["automatic"], window["manual"],
                                 window["first"]))
        automatic, manual, first = self._attempts.totals(self.window_s)
        return DeliveryStats(
            pending=pending, in_flight=flight["rows"], lease_expired=flight["lease_expired"],
            worst=worst, endpoints_overdue=overdue, dead=dead["rows"],
            endpoints_by_status=statuses, circuits_open=circuits["open"],
            circuits_failing=circuits["failing"],
            circuit_longest_open_s=circuits["longest_open_s"], window_s=self.window_s,
            automatic_attempts=automatic, manual_attempts=manual,
            attempted_deliveries=first, dead_in_window=dead["in_window"])


    def _tracked(self, conn: psycopg.Connection[dict[str, Any]]) -> tuple[EndpointStats, ...]:
        ranking = [EndpointStats(r["endpoint"], r["tenant"], r["pending"], r["oldest_age_s"],
                                 r["held"])
                   for r in store.worst_endpoints(conn, self.top_n)]
        figures = {s.endpoint: s for s in ranking}
        before = self.tracker.update(
            [Ranked(s.endpoint, s.tenant, s.held, s.oldest_age_s) for s in ranking],
            self._clock())
        others = [ep for ep in before if ep not in figures]
        if others:
            for r in store.endpoint_figures(conn, others):
                figures[r["endpoint"]] = EndpointStats(
                    r["endpoint"], r["tenant"], r["pending"], r["oldest_age_s"], r["held"])
                self.tracker.note_held(r["endpoint"], r["held"])
        gone = [ep for ep in others if ep not in figures]
        tracked = self.tracker.update([], self._clock(), gone=gone) if gone else before
        return tuple(sorted((figures[ep] for ep in tracked),
                            key=lambda s: (-s.oldest_age_s, s.endpoint)))


def delivery_stats_collector(database_url: str, *, interval_s: float, top_n: int,
                             window_s: float) -> SampledCollector[DeliveryStats]:
    """A collector whose sampler is not started yet (the caller starts it)."""
    source = DeliveryStatsSource(database_url, top_n=top_n, window_s=window_s)
    sampler = BackgroundSampler("delivery_stats", source.sample, interval_s=interval_s,
                                close=source.close)
    return SampledCollector(sampler, delivery_families)
