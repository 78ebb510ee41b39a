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
from hookstream.io.kafka import delete_topics, describe_topics, ensure_topics, group_timeouts
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


def run(stack: Stack, topics: Topics, *argv: str, env: dict[str, str] | None = None,
        **settings: str) -> tuple[int, str, str]:
    env = {"HOOKSTREAM_KAFKA_BOOTSTRAP": stack.bootstrap,
           "HOOKSTREAM_TOPIC_PREFIX": topics.prefix,
           # The command also configures the services' groups: this test's own.
           "HOOKSTREAM_FANOUT_GROUP_ID": f"{topics.prefix}-fanout",
           "HOOKSTREAM_DISPATCHER_GROUP_ID": f"{topics.prefix}-dispatcher",
           **{SETTING[k]: v for k, v in settings.items()}, **(env or {})}
    done = hookstream("topics", *argv, env=env)
    return done.returncode, done.stdout, done.stderr


def groups_line(topics: Topics, session_ms: int = 3000, heartbeat_ms: int = 500) -> str:
    p = topics.prefix
    return (f"group timeouts: session {session_ms} ms, heartbeat {heartbeat_ms} ms on "
            f"{p}-fanout, {p}-dispatcher, {p}-dispatcher-delay\n")


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
    assert run(stack, prefix, partitions="2")[:2] == (
        0, "topics created: none (all exist)\n" + groups_line(prefix))


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


# -- the services' group timeouts (KIP-848 keeps them on the broker, per group) ----------

def test_the_services_groups_get_the_settings_timeouts(stack: Stack, prefix: Topics) -> None:
    # Not the broker's defaults (3000 / 500 on the local stack): values only the command
    # could have put there.
    code, out, err = run(stack, prefix, env={"HOOKSTREAM_KAFKA_SESSION_TIMEOUT_MS": "2500",
                                             "HOOKSTREAM_KAFKA_HEARTBEAT_INTERVAL_MS": "400"})
    assert code == 0, err
    assert out.endswith(groups_line(prefix, 2500, 400)), out
    for group in (f"{prefix.prefix}-fanout", f"{prefix.prefix}-dispatcher",
                  f"{prefix.prefix}-dispatcher-delay"):
        assert group_timeouts(stack.bootstrap, group) == (2500, 400)


def test_timeouts_below_the_brokers_minimum_are_one_clear_error(stack: Stack,
                                                                prefix: Topics) -> None:
    # The local stack's broker allows 1 s at least (Kafka's own minimum is 45 s): asking
    # for 800 ms is what a default production broker does to the 3 s default.
    code, out, err = run(stack, prefix, env={"HOOKSTREAM_KAFKA_SESSION_TIMEOUT_MS": "800",
                                             "HOOKSTREAM_KAFKA_HEARTBEAT_INTERVAL_MS": "300"})
    assert code == 2, (out, err)
    assert "group timeouts" not in out
    [line] = err.strip().splitlines()
    assert "refused" in line and "group.consumer.min.session.timeout.ms" in line, line
    assert "HOOKSTREAM_KAFKA_GROUP_PROTOCOL=classic" in line
    assert group_timeouts(stack.bootstrap, f"{prefix.prefix}-fanout") == (3000, 500)


def test_under_the_classic_protocol_no_group_is_configured(stack: Stack,
                                                          prefix: Topics) -> None:
    code, out, err = run(stack, prefix, env={"HOOKSTREAM_KAFKA_GROUP_PROTOCOL": "classic",
                                             "HOOKSTREAM_KAFKA_SESSION_TIMEOUT_MS": "2500"})
    assert code == 0, err
    assert out.endswith("group timeouts: sent by each member (classic protocol)\n"), out
    assert group_timeouts(stack.bootstrap, f"{prefix.prefix}-fanout") == (3000, 500)
