"""The partition leader SIGKILLed under steady load, on a three-broker KRaft cluster
(``hookstream stack up --brokers 3``, RF 3 / min ISR 2), with the three services running
against it (issue #16).

The broker that leads the most partitions of the events and deliveries topics is killed,
then brought back. Nothing may be lost (reconcile: no gap), every request the receiver
saw is explained by an attempt row, no service exits, and the time without any new first
attempt is measured and bounded.

Marker ``faults``: about two minutes (a cluster of its own on ports 31792–31993).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from hookstream.core.topics import Topics
from hookstream.dev.harness import Pipeline, pipeline_env
from hookstream.dev.receiver import Behaviour, Receiver
from hookstream.outbox import write_event
from tests.e2e.conftest import add_endpoint
from tests.e2e.test_faults_dispatcher_under_load import _assert_reconciled
from tests.helpers import scalar, wait_delivered, wait_until

# solo: it bounds the pause a leader kill causes (3 s of fencing measured; 8 s allowed),
# which four parallel end-to-end tests beside it stretched to 8.5 s (scripts/test.sh)
pytestmark = [pytest.mark.faults, pytest.mark.solo]
log = logging.getLogger(__name__)

# Node N is on these plus 100 * (N - 1). Below the ephemeral range (32768+) on purpose:
# clients reconnecting to a killed broker's port can otherwise connect to themselves
# (source port = that port) and hold it, so the broker cannot bind it when it comes back.
PORT, CONTROLLER_PORT = 31792, 31793
BOOTSTRAP = ",".join(f"127.0.0.1:{PORT + 100 * i}" for i in range(3))
RATE_PER_S = 10  # events, × 4 endpoints
ENDPOINTS = 4
DOWN_S = 12.0  # longer than the controller takes to fence a silent broker (9 s default)


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hookstream.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=180)


@pytest.fixture
def cluster() -> Iterator[dict[str, str]]:
    folder = Path(tempfile.mkdtemp(prefix="hs-leader-kill-"))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
    env = {**clean, "HOOKSTREAM_STACK_DIR": str(folder),
           "HOOKSTREAM_STACK_KAFKA_PORT": str(PORT),
           "HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT)}
    done = cli(env, "stack", "up", "--only", "kafka", "--brokers", "3")
    assert done.returncode == 0, done.stderr
    yield env
    cli(env, "stack", "down", "--only", "kafka", "--purge")
    shutil.rmtree(folder, ignore_errors=True)


def _pids(env: dict[str, str]) -> dict[int, int]:
    status = json.loads(cli(env, "stack", "status", "--json").stdout)["kafka"]
    return {int(node): int(pid) for node, pid in status["pids"].items() if pid}


def _leaders(topics: Topics) -> Counter[int]:
    """How many partitions of the events and deliveries topics each broker leads."""
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP, "logger": log})
    metadata = admin.list_topics(timeout=10).topics
    return Counter(p.leader for name in (topics.events, topics.deliveries)
                   for p in metadata[name].partitions.values())


def _progress(db_url: str) -> str:
    return (f"outbox rows {scalar(db_url, 'SELECT count(*) FROM outbox')}, events "
            f"{scalar(db_url, 'SELECT count(*) FROM events')}, deliveries "
            f"{scalar(db_url, 'SELECT count(*) FROM deliveries')}")


def test_the_partition_leader_killed_under_load_loses_nothing(
        cluster: dict[str, str], db_url: str, receiver: Receiver, log_dir: Path) -> None:
    topics = Topics(f"lk{os.getpid()}")
    replicated = {"HOOKSTREAM_KAFKA_BOOTSTRAP": BOOTSTRAP,
                  "HOOKSTREAM_TOPIC_PREFIX": topics.prefix,
                  "HOOKSTREAM_TOPIC_REPLICATION_FACTOR": "3",
                  "HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS": "2",
                  "HOOKSTREAM_FANOUT_GROUP_ID": f"{topics.prefix}-fanout",
                  "HOOKSTREAM_DISPATCHER_GROUP_ID": f"{topics.prefix}-dispatcher"}
    done = cli({**cluster, **replicated}, "topics", "--partitions", "3")
    assert done.returncode == 0, done.stderr
    for i in range(ENDPOINTS):
        add_endpoint(db_url, receiver, f"e{i}", "acme", behaviour=Behaviour(delay_s=0.02))
    env = pipeline_env(database_url=db_url, bootstrap=BOOTSTRAP, topic_prefix=topics.prefix,
                       allow_private_targets="true", topic_replication_factor="3",
                       topic_min_insync_replicas="2")
    pipeline = Pipeline(env, log_dir).start()
    stop = threading.Event()
    written: list[float] = []

    def write() -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            while not stop.is_set():
                t = time.time()
                write_event(conn, tenant="acme", type="a.b", payload={"t": t})
                written.append(t)
                stop.wait(1 / RATE_PER_S)

    writer = threading.Thread(target=write, daemon=True)
    try:
        writer.start()
        try:
            wait_until(lambda: len(receiver.arrivals) >= 40, 60, message="steady load")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {_progress(db_url)}") from None
        victim, led = _leaders(topics).most_common(1)[0]
        killed_at = time.time()
        os.kill(_pids(cluster)[victim], signal.SIGKILL)
        time.sleep(DOWN_S)
        done = cli(cluster, "stack", "up", "--only", "kafka")  # brings the node back
        assert done.returncode == 0, done.stderr
        back_at = time.time()
        time.sleep(8)  # load continues with the node back
        stop.set()
        writer.join()
        total = len(written) * ENDPOINTS
        wait_delivered(db_url, total, 120)
        problems = [f"{k} exited" for k, p in pipeline.processes.items() if not p.running()]
        assert not problems, problems
    finally:
        stop.set()
        pipeline.stop()
    assert not pipeline.exit_problems(), pipeline.exit_problems()
    _assert_reconciled(db_url, receiver)
    assert len({a.webhook_id for a in receiver.arrivals}) == total

    # The time without any new first attempt, and the slowest commit → first attempt.
    first: dict[str, float] = {}
    latency: dict[str, float] = {}
    for a in sorted(receiver.arrivals, key=lambda a: a.received_at):
        if a.webhook_id not in first:
            first[a.webhook_id] = a.received_at
            latency[a.webhook_id] = a.received_at - orjson.loads(a.body)["t"]
    times = sorted(first.values())
    gaps = [(b - a, a) for a, b in itertools.pairwise(times)]
    longest, at = max(gaps)
    print(f"broker {victim} (leader of {led} of 6 partitions) killed for {DOWN_S:.0f} s: "
          f"longest time without a new first attempt {longest:.2f} s "
          f"(starting {at - killed_at:+.2f} s from the kill), slowest commit → first "
          f"attempt {max(latency.values()):.2f} s, back {back_at - killed_at:.1f} s after "
          f"the kill; {total} deliveries")
    # Leadership moves once the controller fences the dead broker: after its
    # broker.session.timeout.ms, 3 s on the local cluster (measured 3.1–3.3 s here;
    # Kafka's default 9 s gave 12.4 s).
    assert longest < 8.0, f"{longest:.2f}s without a new first attempt"
