"""``hookstream topics`` against a real broker, as a process: it creates topics with the
replication settings and checks existing ones against them (partitions, replication
factor, min.insync.replicas), reporting each difference and exiting 1; a replication
factor the cluster cannot hold is one line and exit 2. The local stack has one broker,
so a replication factor of 2 stands for "what the settings want is not what is there"."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from hookstream.core.topics import Topics
from hookstream.io.kafka import delete_topics, describe_topics, ensure_topics
from tests.conftest import Stack
from tests.integration.test_cli_failures import hookstream


@pytest.fixture
def prefix(stack: Stack) -> Iterator[Topics]:
    topics = Topics(f"t{uuid.uuid4().hex[:10]}")
    yield topics
    delete_topics(stack.bootstrap, [s.name for s in topics.specs()])


SETTING = {"partitions": "HOOKSTREAM_TOPIC_PARTITIONS",
           "replication_factor": "HOOKSTREAM_TOPIC_REPLICATION_FACTOR",
           "min_insync_replicas": "HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS"}


def run(stack: Stack, topics: Topics, *argv: str, **settings: str) -> tuple[int, str, str]:
    env = {"HOOKSTREAM_KAFKA_BOOTSTRAP": stack.bootstrap,
           "HOOKSTREAM_TOPIC_PREFIX": topics.prefix,
           **{SETTING[k]: v for k, v in settings.items()}}
    done = hookstream("topics", *argv, env=env)
    return done.returncode, done.stdout, done.stderr


def test_topics_are_created_with_the_settings(stack: Stack, prefix: Topics) -> None:
    code, _out, err = run(stack, prefix, partitions="2")
    assert code == 0, err
    specs = prefix.specs()
    observed = describe_topics(stack.bootstrap, [s.name for s in specs])
    assert set(observed) == {s.name for s in specs}
    assert len(observed[prefix.events].replicas) == 2
    assert len(observed[prefix.dead].replicas) == 1
    assert all(o.replicas == (1,) * len(o.replicas) and o.min_insync_replicas == 1
               for o in observed.values())
    # a second run finds them as asked
    assert run(stack, prefix, partitions="2")[:2] == (0, "topics created: none (all exist)\n")


def test_existing_topics_that_differ_are_reported_and_fail(stack: Stack, prefix: Topics) -> None:
    ensure_topics(stack.bootstrap, prefix.specs(partitions=3))
    code, out, err = run(stack, prefix, "--partitions", "4")
    assert code == 1, (out, err)
    assert out == "topics created: none (all exist)\n"
    lines = err.splitlines()
    assert f"hookstream: {prefix.events}: partitions is 3, the settings want 4" in lines
    assert f"hookstream: {prefix.deliveries}: partitions is 3, the settings want 4" in lines
    assert not any(prefix.dead in line for line in lines)  # one partition, as wanted
    assert lines[-1].startswith(f"hookstream: {len(prefix.specs()) - 1} existing topic(s) "
                                "differ from the settings"), err
    assert "%" not in err  # no librdkafka line


def test_replication_and_min_isr_are_checked(stack: Stack, prefix: Topics) -> None:
    ensure_topics(stack.bootstrap, prefix.specs(partitions=1))
    code, _out, err = run(stack, prefix, partitions="1", replication_factor="2",
                          min_insync_replicas="2")
    assert code == 1, err
    assert f"hookstream: {prefix.events}: replication factor is 1, the settings want 2" in err
    assert f"hookstream: {prefix.events}: min.insync.replicas is 1, the settings want 2" in err


def test_a_replication_factor_above_the_brokers_is_one_line(stack: Stack,
                                                            prefix: Topics) -> None:
    code, out, err = run(stack, prefix, partitions="1", replication_factor="2")
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "cannot create topic" in err, err
    assert "HOOKSTREAM_TOPIC_REPLICATION_FACTOR=2" in err
