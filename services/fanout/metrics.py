"""The fanout's Prometheus metrics, registered on the registry the runner hands over."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hookstream.ops.observability import at_zero


class FanoutMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.events = at_zero(Counter(
            "hookstream_fanout_events_total", "Events consumed", ["result"], registry=registry),
            ("fanned_out", "conflict", "undecodable", "refused"))
        self.deliveries = Counter(
            "hookstream_fanout_deliveries_created_total", "Delivery rows created",
            registry=registry)
        self.tasks = Counter(
            "hookstream_fanout_tasks_produced_total", "Delivery tasks produced", registry=registry)
        self.coalesced = Counter(
            "hookstream_fanout_coalesced_total",
            "Pending deliveries superseded by the delivery of a newer event of the same "
            "(endpoint, coalescing key)", registry=registry)
        self.batch_seconds = Histogram(
            "hookstream_fanout_batch_seconds", "Duration of one fan-out batch",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=registry)
        self.event_seconds = Histogram(
            "hookstream_fanout_event_seconds",
            "Fan-out duration per event: from its batch's start until its rows are "
            "committed and its tasks handed to the producer",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry)
        self.statement_rows = Histogram(
            "hookstream_fanout_statement_rows",
            "Delivery rows returned by one creating statement (bounded by "
            "FANOUT_MAX_ROWS_PER_STATEMENT)",
            buckets=(1, 10, 100, 500, 1000, 2000, 5000, 10000, 20000, 50000),
            registry=registry)
        self.lag_seconds = Histogram(
            "hookstream_fanout_event_lag_seconds", "Outbox commit → delivery rows durable",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=registry)
        self.errors = at_zero(Counter(
            "hookstream_fanout_errors_total", "Batches that failed", ["kind"], registry=registry),
            ("database", "broker"))
        self.gather_seconds = Gauge(
            "hookstream_fanout_gather_seconds",
            "How long a started batch waits for more events now (grows with this "
            "process's throughput above FANOUT_GATHER_FROM_PER_S, and while the "
            "dispatchers are seconds behind; 0: take what is there)", registry=registry)
