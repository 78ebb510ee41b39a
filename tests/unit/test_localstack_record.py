"""Which ports the local stack's commands use (no server started: the files a running
server leaves are enough). A running server's ports are the ones it was started with;
a stopped one's are the environment's, else the recorded ones, else the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from hookstream.dev.localstack import kafka, postgres, record

PORT_VARS = (kafka.PORT_ENV, kafka.CONTROLLER_PORT_ENV, postgres.PORT_ENV)


@pytest.fixture(autouse=True)
def stack_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOOKSTREAM_STACK_DIR", str(tmp_path))
    for name in PORT_VARS:
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_defaults_without_record_or_environment() -> None:
    assert (kafka.port(), kafka.controller_port(), postgres.port()) == (19092, 19093, 55432)


def test_a_stopped_stack_starts_where_it_was_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    record.remember("kafka", {"port": 29092, "controller_port": 29093})
    record.remember("postgres", {"port": 55442})
    assert (kafka.wanted_ports(), postgres.wanted_port()) == ((29092, 29093), 55442)
    assert kafka.bootstrap() == "127.0.0.1:29092" and ":55442/" in postgres.database_url()
    monkeypatch.setenv(kafka.PORT_ENV, "39092")
    monkeypatch.setenv(postgres.PORT_ENV, "55452")
    assert (kafka.wanted_ports(), postgres.wanted_port()) == ((39092, 29093), 55452)
    record.forget("kafka")
    monkeypatch.delenv(kafka.PORT_ENV)
    assert kafka.wanted_ports() == (19092, 19093)


def test_a_running_broker_keeps_its_ports_whatever_the_environment_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kafka.write_properties((29092, 29093))
    kafka.pid_path().write_text("999999\n")  # the stack believes its broker runs
    monkeypatch.setenv(kafka.PORT_ENV, "19092")
    assert (kafka.port(), kafka.controller_port()) == (29092, 29093)
    assert kafka.bootstrap() == "127.0.0.1:29092"
    warning = record.environment_disagrees(kafka.PORT_ENV, kafka.port())
    assert warning is not None and "runs on 29092" in warning
    kafka.pid_path().unlink()  # stopped: the environment chooses again
    assert kafka.port() == 19092


def test_a_running_cluster_keeps_its_port(monkeypatch: pytest.MonkeyPatch) -> None:
    postgres.data_dir().mkdir(parents=True)
    # postmaster.pid: pid, data dir, start time, port, ...
    (postgres.data_dir() / "postmaster.pid").write_text(
        f"4242\n{postgres.data_dir()}\n1700000000\n55442\n/tmp\n127.0.0.1\n")
    monkeypatch.setenv(postgres.PORT_ENV, "55432")
    assert postgres.port() == 55442
    assert postgres.database_url() == "postgresql://hookstream@127.0.0.1:55442/hookstream"
    assert record.environment_disagrees(postgres.PORT_ENV, 55442) is not None
    assert record.environment_disagrees(postgres.PORT_ENV, 55432) is None


def test_a_bad_port_variable_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(postgres.PORT_ENV, "lots")
    with pytest.raises(record.StackError, match="HOOKSTREAM_STACK_PG_PORT='lots'"):
        postgres.wanted_port()


def test_the_record_is_json_in_the_stack_folder(stack_dir: Path) -> None:
    record.remember("postgres", {"port": 55442})
    record.remember("kafka", {"port": 29092, "controller_port": 29093})
    data = record.read()
    assert data["postgres"] == {"port": 55442} and data["kafka"]["port"] == 29092
    assert data["stack_dir"] == str(stack_dir) and data["version"] == 1
    (stack_dir / "stack.json").write_text("{not json")
    assert record.read() == {} and record.recorded_port("kafka") is None
