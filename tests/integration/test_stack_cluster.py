"""``hookstream stack up --brokers 3``: three KRaft nodes (each broker and controller) from
the same jars on loopback, in a stack folder and on ports of their own, driven as an
operator would (processes). The cluster holds RF 3 / min ISR 2 topics, keeps taking
acks=all writes with one node SIGKILLed, brings that node back on the next ``up``, and
refuses to be restarted as another size over the same data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hookstream.core.topics import Topics
from hookstream.io.kafka import Publisher, Record, describe_topics

# Node N is on these plus 100 * (N - 1): 30492/30493, 30592/30593, 30692/30693 — below
# the ephemeral range (32768+), where another process's outgoing connection (or a client
# reconnecting to a killed node, connecting to itself) can hold the port ("already in
# use" on the next start: seen in the suite with 39592).
PORT, CONTROLLER_PORT = 30492, 30493


@pytest.fixture
def cluster_env() -> Iterator[dict[str, str]]:
    folder = Path(tempfile.mkdtemp(prefix="hs-cluster-test-"))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
    env = {**clean, "HOOKSTREAM_STACK_DIR": str(folder),
           "HOOKSTREAM_STACK_KAFKA_PORT": str(PORT),
           "HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT)}
    yield env
    subprocess.run([sys.executable, "-m", "hookstream.cli", "stack", "down", "--only",
                    "kafka", "--purge"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(folder, ignore_errors=True)


def hookstream(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hookstream.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=180)


def test_a_three_broker_cluster_holds_replicated_topics_through_a_lost_node(
        cluster_env: dict[str, str]) -> None:
    done = hookstream(cluster_env, "stack", "up", "--only", "kafka", "--brokers", "3")
    assert done.returncode == 0, done.stderr
    status = json.loads(hookstream(cluster_env, "stack", "status", "--json").stdout)["kafka"]
    assert status["brokers"] == 3 and status["healthy"], status
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in (PORT, PORT + 100, PORT + 200))
    assert status["bootstrap"] == bootstrap
    exports = hookstream(cluster_env, "stack", "env").stdout
    assert "export HOOKSTREAM_TOPIC_REPLICATION_FACTOR=3" in exports
    assert "export HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS=2" in exports

    topics = Topics(f"t{uuid.uuid4().hex[:10]}")
    settings = {"HOOKSTREAM_KAFKA_BOOTSTRAP": bootstrap, "HOOKSTREAM_TOPIC_PREFIX": topics.prefix,
                "HOOKSTREAM_TOPIC_REPLICATION_FACTOR": "3",
                "HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS": "2"}
    done = hookstream({**cluster_env, **settings}, "topics", "--partitions", "3")
    assert done.returncode == 0, done.stderr
    observed = describe_topics(bootstrap, [s.name for s in topics.specs()])
    assert len(observed) == len(topics.specs())
    assert all(set(o.replicas) == {3} and o.min_insync_replicas == 2 for o in observed.values())

    # One node lost: two replicas remain in sync, so acks=all writes still succeed.
    os.kill(int(status["pids"]["2"]), signal.SIGKILL)
    publisher = Publisher(bootstrap, "cluster-test", **{"message.timeout.ms": 20_000})
    try:
        failed = publisher.publish(
            [Record(topics.events, f"k{i}".encode(), b"v") for i in range(30)], wait_s=30)
    finally:
        publisher.close(5)
    assert failed == []

    # The next `up` brings the lost node back; the size cannot change over the same data.
    done = hookstream(cluster_env, "stack", "up", "--only", "kafka")
    assert done.returncode == 0, done.stderr
    status = json.loads(hookstream(cluster_env, "stack", "status", "--json").stdout)["kafka"]
    assert status["healthy"] and all(status["pids"].values()), status
    done = hookstream(cluster_env, "stack", "up", "--only", "kafka", "--brokers", "1")
    assert done.returncode != 0
    assert "runs 3 broker(s), not 1" in done.stderr, done.stderr
