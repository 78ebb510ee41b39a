"""The local stack as a cluster (``stack up --brokers N``), without starting a server:
each node's ports and rendered server.properties, the replication a size can hold, and
which size a stack has (formatted data and a running node win over the record)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookstream.cli import main as cli_main
from hookstream.dev import localstack
from hookstream.dev.localstack import kafka


@pytest.fixture(autouse=True)
def stack_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOOKSTREAM_STACK_DIR", str(tmp_path))
    for name in (kafka.PORT_ENV, kafka.CONTROLLER_PORT_ENV):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def props(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if line and not line.startswith("#"))


@given(st.integers(1024, 60_000), st.integers(1, kafka.MAX_BROKERS))
def test_no_two_ports_of_a_cluster_meet(base: int, brokers: int) -> None:
    ports = [p for n in range(1, brokers + 1) for p in kafka.node_ports((base, base + 1), n)]
    assert len(set(ports)) == len(ports)


@pytest.mark.parametrize(("brokers", "expected"), [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)),
                                                   (5, (3, 2))])
def test_replication_a_cluster_can_hold_with_one_node_down(
        brokers: int, expected: tuple[int, int]) -> None:
    assert kafka.replication_for(brokers) == expected
    rf, min_isr = expected
    assert rf <= brokers and (brokers == 1 or rf - min_isr >= 1)


def test_one_node_keeps_the_single_node_layout() -> None:
    path = kafka.write_properties((19092, 19093))
    assert path == kafka.kafka_dir() / "server.properties"
    p = props(path)
    assert p["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093"
    assert "controller.quorum.voters" not in p
    assert (p["node.id"], p["default.replication.factor"], p["min.insync.replicas"]) == \
        ("1", "1", "1")


def test_each_node_of_three_has_its_ports_data_and_the_static_voters() -> None:
    rendered = [props(kafka.write_properties((19092, 19093), n, 3)) for n in (1, 2, 3)]
    voters = "1@127.0.0.1:19093,2@127.0.0.1:19193,3@127.0.0.1:19293"
    for n, p in enumerate(rendered, start=1):
        assert p["node.id"] == str(n)
        assert p["controller.quorum.voters"] == voters
        port = 19092 + 100 * (n - 1)
        assert p["listeners"] == f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{port + 1}"
        assert p["log.dirs"] == str(kafka.data_dir(n))
        assert (p["default.replication.factor"], p["min.insync.replicas"],
                p["offsets.topic.replication.factor"], p["transaction.state.log.min.isr"],
                p["unclean.leader.election.enable"]) == ("3", "2", "3", "2", "false")
    assert len({p["log.dirs"] for p in rendered}) == 3


def test_a_running_cluster_is_its_size_everywhere() -> None:
    for n in (1, 2, 3):
        kafka.write_properties((29092, 29093), n, 3)
    kafka.pid_path().write_text("999999\n")  # the stack believes its broker runs
    assert kafka.brokers() == 3
    assert kafka.bootstrap() == "127.0.0.1:29092,127.0.0.1:29192,127.0.0.1:29292"
    settings = localstack.env()
    assert settings["HOOKSTREAM_KAFKA_BOOTSTRAP"] == kafka.bootstrap()
    assert (settings["HOOKSTREAM_TOPIC_REPLICATION_FACTOR"],
            settings["HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS"]) == ("3", "2")


def test_a_single_node_stack_exports_no_topic_settings() -> None:
    assert kafka.brokers() == 1
    assert set(localstack.env()) == {"HOOKSTREAM_DATABASE_URL", "HOOKSTREAM_KAFKA_BOOTSTRAP",
                                     "HOOKSTREAM_SECRET_KEYS"}


def test_formatted_data_fixes_the_size() -> None:
    kafka.write_properties((19092, 19093), 1, 3)
    kafka.data_dir().mkdir(parents=True)
    (kafka.data_dir() / "meta.properties").write_text("cluster.id=x\n")
    assert kafka.wanted_brokers() == 3
    assert kafka.wanted_brokers(1) == 1  # asked for; launch() then refuses it


@pytest.mark.parametrize("value", ["0", "10", "x"])
def test_a_broker_count_out_of_range_is_refused(
        value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["stack", "up", "--brokers", value]) == 2
    assert "--brokers" in capsys.readouterr().err
