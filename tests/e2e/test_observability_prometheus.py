"""A real Prometheus (Debian's package) scrapes the three running services with the
repository's scrape jobs and alert rules: every dashboard expression and every rule is
valid and has data behind it, the expositions pass ``promtool check metrics``, the lag
Prometheus sees matches Kafka's own tool, and alerts go pending when their cause occurs.

The module starts one pipeline and one Prometheus (a few seconds each) and shares them.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import yaml

from hookstream.core.topics import Topics
from hookstream.dev.harness import Pipeline, pipeline_env
from hookstream.dev.localstack.kafka import CONSUMER_GROUP_COMMAND, run_tool
from hookstream.dev.receiver import Behaviour, Receiver, ReceiverThread
from hookstream.endpoints import create_endpoint
from hookstream.io.kafka import delete_topics, ensure_topics
from hookstream.outbox import write_event
from tests.conftest import Stack
from tests.helpers import stop_cleanly, wait_until
from tests.prometheus_support import DEPLOY, RULES, PrometheusServer, scrape_pipeline

DASHBOARD = DEPLOY / "grafana" / "dashboards" / "hookstream.json"
# Grafana's macros, replaced by what Grafana would send for a short range at 1 s scrapes
GRAFANA_MACROS = {"$__rate_interval": "30s", "$__interval": "5s", "$__range": "5m"}
STUCK_AGE_S = 120  # the lost-task delivery is this old when the test starts


# "... or vector(0)" always returns data: evaluated with the fallback, a panel over a
# metric nobody exports would pass. The services publish their counters at 0 from the
# start instead (hookstream.ops.observability.at_zero), so no panel needs one.
CONSTANT_FALLBACK = re.compile(r"\s+or\s+vector\([^()]*\)\s*$")


def _dashboard_exprs() -> list[tuple[str, str]]:
    """(panel / target, expression as Prometheus gets it, without a constant fallback)."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = CONSTANT_FALLBACK.sub("", target["expr"])
            for macro, value in GRAFANA_MACROS.items():
                expr = expr.replace(macro, value)
            out.append((f"{panel['title']} / {target['refId']}", expr))
    return out


def _rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


@pytest.fixture(scope="module")
def env(stack: Stack, template_db: str, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("observability")
    dbname = f"hs_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {dbname} TEMPLATE {template_db}")
    db_url = stack.url_for(dbname)
    topics = Topics(f"t{uuid.uuid4().hex[:10]}")
    ensure_topics(stack.bootstrap, topics.specs(partitions=3))
    receiver = Receiver()
    thread = ReceiverThread(receiver).start()
    pipeline = Pipeline(pipeline_env(
        database_url=db_url, bootstrap=stack.bootstrap, topic_prefix=topics.prefix,
        allow_private_targets="true", lag_sample_interval_s="1", db_metrics_interval_s="1",
        # The lost task below must stay lost for the gauges to show it: the sweeper (which
        # would re-queue it after 120 s) waits an hour here.
        sweep_after_s="3600"),
        work / "logs")
    prometheus: PrometheusServer | None = None
    try:
        with psycopg.connect(db_url) as conn:
            endpoints = {}
            for name, behaviour in (("ok", None), ("broken", Behaviour(status=500)),
                                    ("stuck", Behaviour(status=500))):
                ep = create_endpoint(conn, tenant="acme" if name != "stuck" else "globex",
                                     url=receiver.url(name), allow_insecure=True)
                receiver.add(name, ep.secret, behaviour)
                endpoints[name] = str(ep.endpoint_id)
            # A delivery whose task was lost (no record on the deliveries topic): Kafka lag
            # cannot see it, the pending-age gauges must.
            event = uuid.uuid4()
            conn.execute(
                "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,"
                " committed_at, payload, payload_sha256) VALUES (%s, 'globex', 'x.y', 1,"
                " now(), now(), '\\x7b7d', '\\x00')", (event,))
            conn.execute(
                "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
                " created_at, next_attempt_at, expires_at, committed_at)"
                " SELECT event_id, %s, 'globex', 1,"
                " now() - make_interval(secs => %s), now() - make_interval(secs => %s),"
                " now() + interval '1 day', committed_at FROM events WHERE event_id = %s",
                (endpoints["stuck"], STUCK_AGE_S, STUCK_AGE_S, event))
        pipeline.start()
        with psycopg.connect(db_url) as conn:
            for i in range(20):
                write_event(conn, tenant="acme", type="invoice.paid", payload={"i": i})
        wait_until(lambda: len(receiver.delivered_ids("ok")) >= 20, 60,
                   message="deliveries to the healthy endpoint")

        prometheus = scrape_pipeline(pipeline, work)
        yield {"prometheus": prometheus, "pipeline": pipeline, "topics": topics,
               "db_url": db_url, "endpoints": endpoints, "stack": stack}
    finally:
        if prometheus is not None:
            prometheus.stop()
        pipeline.stop()
        thread.stop()
        delete_topics(stack.bootstrap, [s.name for s in topics.specs()])
        with psycopg.connect(stack.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
    problems = pipeline.exit_problems()
    assert not problems, "\n\n".join(problems)


def test_every_service_exposition_passes_promtool_check_metrics(env: dict[str, Any]) -> None:
    pipeline: Pipeline = env["pipeline"]
    for name in ("relay", "fanout", "dispatcher"):
        status, body = pipeline[name].get("/metrics")
        assert status == 200
        result = subprocess.run(["promtool", "check", "metrics"], input=body,
                                capture_output=True, timeout=30, check=False)
        assert result.returncode == 0, (name, result.stdout, result.stderr)


@pytest.mark.parametrize("title, expr", _dashboard_exprs())
def test_dashboard_expression_returns_data(env: dict[str, Any], title: str, expr: str) -> None:
    prometheus: PrometheusServer = env["prometheus"]
    # rates need two scrapes, the samplers a round: give each expression a few seconds
    wait_until(lambda: prometheus.query(expr), 20, 0.5, message=f"data for {title!r}: {expr}")


def test_alert_rules_load_evaluate_and_have_data_behind_them(env: dict[str, Any]) -> None:
    prometheus: PrometheusServer = env["prometheus"]
    expected = {r["alert"] for r in _rules()}

    def evaluated() -> list[dict[str, Any]]:
        rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        done = [r for r in rules if r.get("lastEvaluation", "").startswith("20")]
        return rules if len(done) == len(rules) == len(expected) else []

    rules = wait_until(evaluated, 20, 0.5, message="every rule evaluated")
    assert {r["name"] for r in rules} == expected
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
        # a rule over a metric nobody exports would evaluate fine and never fire
        for metric in set(re.findall(r"\b((?:hookstream|kafka)_[a-z_]+|up)\b", rule["query"])):
            assert prometheus.query(f'count({{__name__="{metric}"}})'), (rule["name"], metric)


def test_lag_in_prometheus_matches_kafka_consumer_groups(env: dict[str, Any]) -> None:
    prometheus: PrometheusServer = env["prometheus"]
    topics: Topics = env["topics"]
    for group, topic in ((f"{topics.prefix}-fanout", topics.events),
                         (f"{topics.prefix}-dispatcher", topics.deliveries)):

        def tool(group: str = group, topic: str = topic) -> dict[int, tuple[int, ...]]:
            out = run_tool(CONSUMER_GROUP_COMMAND, [
                "--bootstrap-server", env["stack"].bootstrap, "--describe", "--group", group],
                timeout=120, check=True).stdout
            read: dict[int, tuple[int, ...]] = {}
            for cols in (line.split() for line in out.splitlines()):
                if len(cols) >= 6 and cols[0] == group and cols[1] == topic:
                    end = int(cols[4])
                    # "-": never committed (no record there yet). We count from the log
                    # start, which is 0 on these fresh topics.
                    current = 0 if cols[3] == "-" else int(cols[3])
                    lag = end - current if cols[5] == "-" else int(cols[5])
                    read[int(cols[2])] = (current, end, lag)
            assert read and sum(end for _, end, _ in read.values()) > 0, out
            return read

        def exported(group: str = group, topic: str = topic) -> dict[int, tuple[int, ...]]:
            sel = f'consumergroup="{group}", topic="{topic}"'
            got: dict[int, list[int]] = {}
            for name in ("kafka_consumergroup_current_offset",
                         "kafka_topic_partition_current_offset", "kafka_consumergroup_lag"):
                labels = sel if name != "kafka_topic_partition_current_offset" \
                    else f'topic="{topic}"'
                # every service exports every group alike: one value per partition
                for r in prometheus.query(f"max by (partition) ({name}{{{labels}}})"):
                    got.setdefault(int(r["metric"]["partition"]), []).append(int(float(
                        r["value"][1])))
            return {p: tuple(v) for p, v in got.items()}

        readings: list[Any] = []

        def agree(tool: Any = tool, exported: Any = exported,
                  readings: list[Any] = readings) -> bool:
            # The failing and stuck endpoints' retries still move the deliveries topic
            # now and then, so the tool's reading (seconds of JVM start) is compared with
            # Prometheus's just before and just after it: one of them must be the same.
            before, read, after = exported(), tool(), exported()
            readings[:] = [before, read, after]
            return read in (before, after)

        try:
            wait_until(agree, 60, 0.5, message=f"{group}: Prometheus == tool")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; Prometheus, tool, Prometheus: {readings}") from None


def test_a_lost_task_shows_in_pending_age_although_kafka_lag_is_zero(
        env: dict[str, Any]) -> None:
    prometheus: PrometheusServer = env["prometheus"]
    stuck = env["endpoints"]["stuck"]
    topics: Topics = env["topics"]
    worst = wait_until(lambda: prometheus.query(
        f'hookstream_endpoint_oldest_pending_age_seconds{{endpoint="{stuck}"}}'), 15, 0.5,
        message="the stuck endpoint among the worst endpoints")
    assert float(worst[0]["value"][1]) >= STUCK_AGE_S
    assert worst[0]["metric"]["tenant"] == "globex"
    # Kafka's lag reads zero (the delay tiers hold retries on purpose: their lag is not a
    # backlog) while the lost task's age stays: waited for, since a record produced a
    # moment before a sample is counted as lag until the consumer's next commit.
    lag_query = (
        f'max(kafka_consumergroup_group_topic_sum_lag{{topic=~"{re.escape(topics.prefix)}.*",'
        ' consumergroup!~".*-delay"})')
    wait_until(lambda: float(prometheus.query(lag_query)[0]["value"][1]) == 0, 15, 0.5,
               message="Kafka lag of the pipeline's groups at zero")
    oldest_new = prometheus.query(
        'max(hookstream_deliveries_oldest_pending_age_seconds{kind="new"})')
    assert float(oldest_new[0]["value"][1]) >= STUCK_AGE_S
    # and the customer-level alert for that one endpoint is on its way (pending until its
    # `for` has passed); one endpoint is not the platform being behind
    alerts = wait_until(lambda: prometheus.query(
        'ALERTS{alertname="HookstreamEndpointBehind"}'), 15, 0.5,
        message="HookstreamEndpointBehind pending")
    assert {(a["metric"]["endpoint"], a["metric"]["severity"]) for a in alerts} == {
        (stuck, "customer")}
    assert not prometheus.query('ALERTS{alertname="HookstreamPlatformBehind"}')


def test_service_down_alert_goes_pending_when_a_service_stops(env: dict[str, Any]) -> None:
    # Runs last in this module: it stops the relay.
    prometheus: PrometheusServer = env["prometheus"]
    pipeline: Pipeline = env["pipeline"]
    assert not prometheus.query('ALERTS{alertname="HookstreamServiceDown"}')
    stop_cleanly(pipeline["relay"])
    alerts = wait_until(lambda: prometheus.query(
        'ALERTS{alertname="HookstreamServiceDown", alertstate="pending"}'), 20, 0.5,
        message="HookstreamServiceDown pending")
    assert {a["metric"]["job"] for a in alerts} == {"hookstream-relay"}
