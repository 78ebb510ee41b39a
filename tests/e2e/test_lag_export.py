"""Consumer lag that never goes dark: every service exports every group of the pipeline
(fanout, dispatcher, delay forwarder), so while the dispatcher is down its lag is still
exported by the relay and the fanout — and rises with the work it is not doing."""

from __future__ import annotations

import psycopg

from hookstream.core.topics import Topics
from hookstream.dev.harness import ServiceProcess
from hookstream.dev.receiver import Receiver
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.helpers import scalar, service_metric, wait_until

LAG = "kafka_consumergroup_group_topic_sum_lag"


def _groups(service: ServiceProcess, topics: Topics) -> dict[tuple[str, str], float]:
    """(group, topic) → the exported lag sum, for the pipeline's three groups."""
    prefix = topics.prefix
    wanted = [(f"{prefix}-fanout", topics.events), (f"{prefix}-dispatcher", topics.deliveries),
              *((f"{prefix}-dispatcher-delay", t) for t in topics.tiers.topics)]
    code, body = service.get("/metrics")
    assert code == 200
    text = body.decode()
    return {(g, t): service_metric(service, LAG, consumergroup=g, topic=t)
            for g, t in wanted if f'consumergroup="{g}",topic="{t}"' in text}


def test_every_service_exports_every_group_and_a_stopped_dispatcher_lag_rises(
        db_url: str, topics: Topics, receiver: Receiver,
        start_pipeline: StartPipeline) -> None:
    p = start_pipeline(lag_sample_interval_s="1")
    add_endpoint(db_url, receiver, "ep", "acme")
    expected = 2 + len(topics.tiers.topics)
    for name in ("relay", "fanout", "dispatcher"):
        wait_until(lambda n=name: len(_groups(p[n], topics)) == expected, 30,  # type: ignore[misc]
                   message=f"{name} exports all {expected} (group, topic) lag series")

    p["dispatcher"].terminate()
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(20):
            write_event(conn, tenant="acme", type="a.b", payload={"i": i})
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries") == 20, 30,
               message="fanned out while the dispatcher is down")
    # The fanout's tasks wait on the deliveries topic: both remaining services say so.
    dispatcher = (f"{topics.prefix}-dispatcher", topics.deliveries)
    for name in ("relay", "fanout"):
        wait_until(lambda n=name: _groups(p[n], topics).get(dispatcher) == 20, 30,  # type: ignore[misc]
                   message=f"{name} exports the stopped dispatcher's lag")
        assert service_metric(p[name], "kafka_consumergroup_lag_seconds",
                              consumergroup=dispatcher[0]) > 0

    p["dispatcher"].restart()
    wait_until(lambda: len(receiver.arrivals) == 20, 60, message="delivered after restart")
    wait_until(lambda: _groups(p["fanout"], topics).get(dispatcher) == 0, 30,
               message="the lag back to 0")
