"""The dispatcher's Prometheus metrics. Labelled counters publish every label value at 0
from the start (``at_zero``), so ``rate()`` sees their first event."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from hookstream.ops.loop_metrics import LoopCounter, LoopHistogram
from hookstream.ops.observability import at_zero
from hookstream.policy.classify import ErrorClass, Outcome

WORST_N = 10  # endpoints with a per-endpoint in-flight series (bounded cardinality)
DROP_REASONS = ("endpoint_gone", "paused", "disabled")
DEFER_REASONS = ("not_due", "circuit", "backlog", "early")
SWEEP_REASONS = ("lost", "released", "parked")  # see sweeper.sql
ERROR_KINDS = ("kafka", "kafka_produce", "database", "reaper", "sweeper", "unstorable_outcome")
CIRCUIT_TO = ("open", "closed", "disabled")


def _status_classes() -> tuple[str, ...]:
    # What _observe can label an attempt with: an HTTP class, or the transport error.
    http = tuple(f"{n}xx" for n in range(1, 6))
    transport = tuple(e.value for e in ErrorClass if not e.value.startswith("http_"))
    return (*http, *transport, "none")


class DispatcherMetrics:
    def __init__(self, registry: CollectorRegistry):
        # Updated once per attempt, only on the event loop: lock-free (loop_metrics).
        self.attempts = LoopCounter(
            "hookstream_dispatcher_attempts_total", "HTTP attempts by outcome and status class",
            ["outcome", "status_class"], registry=registry)
        self.latency = LoopHistogram(
            "hookstream_dispatcher_attempt_seconds", "Duration of one HTTP attempt",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry)
        self.first_attempt = LoopHistogram(
            "hookstream_first_attempt_latency_seconds",
            "Outbox commit → start of a delivery's first attempt",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800),
            registry=registry)
        # The dispatcher's share of a first attempt's latency budget (issue #15), new
        # tasks only: read from Kafka → claim sent (the scheduler's wait), the claim's
        # round trip, claim returned → the attempt starts.
        stage_buckets = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5)
        self.stage_read = LoopHistogram(
            "hookstream_dispatcher_read_seconds",
            "New task produced (its Kafka timestamp) → read by this dispatcher: the broker"
            " hop, the fetch and the hand-over to the event loop",
            buckets=stage_buckets, registry=registry)
        self.stage_queued = LoopHistogram(
            "hookstream_dispatcher_queued_seconds",
            "New task read from Kafka → its claim sent (waiting in the scheduler)",
            buckets=stage_buckets, registry=registry)
        self.stage_claim = LoopHistogram(
            "hookstream_dispatcher_claim_seconds", "One claim round trip to PostgreSQL",
            buckets=stage_buckets, registry=registry)
        self.stage_start = LoopHistogram(
            "hookstream_dispatcher_start_seconds",
            "Claim returned → the new task's attempt starts",
            buckets=stage_buckets, registry=registry)
        self.in_flight = Gauge(
            "hookstream_dispatcher_in_flight", "Attempts in flight in this process",
            registry=registry)
        self.queued = Gauge(
            "hookstream_dispatcher_queued", "Tasks waiting in this process's scheduler",
            registry=registry)
        self.endpoint_in_flight = Gauge(
            "hookstream_dispatcher_endpoint_in_flight",
            f"In-flight attempts of the {WORST_N} busiest endpoints of this process",
            ["endpoint"], registry=registry)
        self.stale = Counter(
            "hookstream_dispatcher_stale_tasks_total",
            "Duplicate or stale tasks dropped (their delivery was not claimable)",
            registry=registry)
        self.dropped = Counter(
            "hookstream_dispatcher_tasks_dropped_total",
            "Tasks of deleted, paused or disabled endpoints (rows stay pending, held until"
            " the endpoint is active again)",
            ["reason"], registry=registry)
        self.deferred = Counter(
            "hookstream_dispatcher_deferred_total",
            "Tasks deferred instead of held: to a delay tier (not_due; early: the task"
            " arrived before its attempt's outcome was written) or parked in PostgreSQL"
            " (backlog, circuit)",
            ["reason"], registry=registry)
        self.caught_up = Counter(
            "hookstream_dispatcher_backlog_caught_up_total",
            "Times an endpoint that sped up had its parked backlog pulled forward to its"
            " new pace", registry=registry)
        self.refilled = Counter(
            "hookstream_dispatcher_backlog_refilled_total",
            "Parked deliveries handed back early because their endpoint had run out of"
            " work (its drain schedule was slower than the endpoint)", registry=registry)
        self.throttled = Counter(
            "hookstream_dispatcher_throttled_total",
            "429/503 answers that lowered an endpoint's rate", registry=registry)
        self.retries = Counter(
            "hookstream_retries_scheduled_total", "Automatic retries scheduled, by first tier",
            ["tier"], registry=registry)
        self.replays = Counter(
            "hookstream_replay_attempts_total", "Manual replay attempts by outcome",
            ["outcome"], registry=registry)
        self.dead = Counter(
            "hookstream_dead_letters_total", "Deliveries that became dead", registry=registry)
        self.circuit = Counter(
            "hookstream_circuit_transitions_total", "Endpoint circuit changes",
            ["to"], registry=registry)
        self.poison = Counter(
            "hookstream_dispatcher_undecodable_tasks_total",
            "Task records that could not be decoded (sent to the dead-letter topic)",
            registry=registry)
        self.reaped = Counter(
            "hookstream_dispatcher_leases_reaped_total",
            "Deliveries handed back after their worker died mid-attempt", registry=registry)
        self.swept = Counter(
            "hookstream_dispatcher_swept_total",
            "Pending deliveries the sweeper handed back to the queue, by why: lost (overdue"
            " with no task: a bug or a lost record), released (held work of an endpoint"
            " active again), parked (a slow endpoint's backlog whose slot came)",
            ["reason"], registry=registry)
        self.stuck = Gauge(
            "hookstream_dispatcher_stuck_endpoints",
            "Endpoints whose tasks were deferred in the last refresh period without any"
            " being served (a dispatcher bug: see the log for their ids)", registry=registry)
        self.late = Counter(
            "hookstream_dispatcher_late_outcomes_total",
            "Outcomes written after another attempt took the delivery over (attempt row kept)",
            registry=registry)
        self.errors = Counter(
            "hookstream_dispatcher_errors_total", "Failures of the dispatcher's own machinery",
            ["kind"], registry=registry)

    def publish_at_zero(self, tiers: list[str]) -> None:
        """Every label value each counter can take, at 0 (``tiers``: the retry tiers'
        short names and ``deliveries``)."""
        for outcome in Outcome:
            self.replays.labels(outcome.value)
            for status_class in _status_classes():
                self.attempts.inc(outcome.value, status_class, amount=0.0)
        at_zero(self.dropped, DROP_REASONS)
        at_zero(self.deferred, DEFER_REASONS)
        at_zero(self.retries, tiers)
        at_zero(self.circuit, CIRCUIT_TO)
        at_zero(self.errors, ERROR_KINDS)
        at_zero(self.swept, SWEEP_REASONS)
