"""A labelled counter has no series until its first increment, and rate() over a series
that appears at 1 misses that first event (and ``sum(rate(...))`` of no series is no
data, not 0). So every label value a service's counters can take is published at 0 from
the start: checked on freshly started relay and fanout processes (the fanout serves the
control-plane API and the lag and database samplers), before anything has happened."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from hookstream.core.topics import Topics
from hookstream.dev.harness import ServiceProcess, pipeline_env
from tests.conftest import Stack
from tests.helpers import service_metric, stop_cleanly, wait_until

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]

RELAY = {
    "hookstream_relay_quarantined_total": ("reason", [
        "schema_version", "event_type", "too_large", "broker_rejected", "json", "other"]),
    "hookstream_relay_errors_total": ("kind", ["database", "broker"]),
}
FANOUT = {
    "hookstream_fanout_events_total": ("result", [
        "fanned_out", "conflict", "undecodable", "refused"]),
    "hookstream_fanout_errors_total": ("kind", ["database", "broker"]),
    "hookstream_api_replays_total": ("kind", ["single", "replay", "recover"]),
    "hookstream_sampler_errors_total": ("sampler", ["consumer_lag", "delivery_stats"]),
}
# A few of the API's (method, route, status) series, one per documented response class.
API_REQUESTS = [
    ("POST", "/v1/deliveries/{delivery_id}/replay", "202"),
    ("POST", "/v1/deliveries/{delivery_id}/replay", "409"),
    ("GET", "/v1/endpoints", "200"),
    ("POST", "/v1/endpoints", "400"),
    ("DELETE", "/v1/endpoints/{endpoint_id}", "202"),
    ("GET", "/v1/me", "401"),
]


def _series(service: ServiceProcess) -> Series:
    code, body = service.get("/metrics")
    assert code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body.decode()) for s in f.samples}


def _missing(got: Series, wanted: dict[str, tuple[str, list[str]]]) -> list[str]:
    out = []
    for name, (label, values) in wanted.items():
        for value in values:
            if got.get((name, ((label, value),))) != 0.0:
                out.append(f'{name}{{{label}="{value}"}}')
    return out


def test_labelled_counters_publish_every_label_value_at_zero_from_the_start(
        stack: Stack, db_url: str, topics: Topics, log_dir: Path) -> None:
    env = pipeline_env(database_url=db_url, bootstrap=stack.bootstrap,
                       topic_prefix=topics.prefix)
    relay = ServiceProcess("relay", env, log_dir / "relay.log").start()
    fanout = ServiceProcess("fanout", env, log_dir / "fanout.log").start()
    try:
        relay.wait_healthy()
        fanout.wait_healthy()
        wait_until(lambda: service_metric(fanout, "hookstream_api_up") == 1.0, 30,
                   message="the API serving")
        assert _missing(_series(relay), RELAY) == []
        got = _series(fanout)
        assert _missing(got, FANOUT) == []
        requests = [(m, r, s) for m, r, s in API_REQUESTS
                    if got.get(("hookstream_api_requests_total", (
                        ("method", m), ("route", r), ("status", s)))) != 0.0]
        assert requests == [], "hookstream_api_requests_total series missing at start"
    finally:
        stop_cleanly(relay, fanout)
