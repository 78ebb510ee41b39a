"""The local stack remembers its ports: a private PostgreSQL started on a port of its own,
then asked about from a shell without the port variable (another checkout's defaults),
answers with its own port; the test suite's connection settings come from it too; a
stopped server starts again where it was; ``down --purge`` forgets it with its data.

A real cluster (initdb, pg_ctl) in a folder of its own; Kafka is left stopped there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hookstream.cli import main as cli_main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def stack_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Not under pytest's tmp_path: as root the cluster runs as `postgres`, which must be
    # able to reach the folder.
    folder = Path(tempfile.mkdtemp(prefix="hs-stack-test-"))
    folder.chmod(folder.stat().st_mode | stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP
                 | stat.S_IROTH | stat.S_IXOTH)
    for name in ("HOOKSTREAM_STACK_PG_PORT", "HOOKSTREAM_STACK_KAFKA_PORT",
                 "HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT", "HOOKSTREAM_DATABASE_URL",
                 "HOOKSTREAM_KAFKA_BOOTSTRAP", "HOOKSTREAM_EXTERNAL_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOOKSTREAM_STACK_DIR", str(folder))
    yield folder
    monkeypatch.delenv("HOOKSTREAM_STACK_PG_PORT", raising=False)
    cli_main(["stack", "down", "--only", "postgres"])
    shutil.rmtree(folder, ignore_errors=True)


def stack(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(["stack", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_stack_answers_with_the_ports_it_started_with(
        stack_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    monkeypatch.setenv("HOOKSTREAM_STACK_PG_PORT", str(port))
    code, out, _ = stack(capsys, "up", "--only", "postgres")
    assert code == 0 and f"127.0.0.1:{port}/hookstream" in out
    recorded = json.loads((stack_dir / "stack.json").read_text())
    assert recorded["postgres"]["port"] == port and recorded["stack_dir"] == str(stack_dir)

    # A shell without the variable: the record, not the default 55432.
    monkeypatch.delenv("HOOKSTREAM_STACK_PG_PORT")
    url = f"postgresql://hookstream@127.0.0.1:{port}/hookstream"
    code, out, _ = stack(capsys, "env")
    assert code == 0 and f"export HOOKSTREAM_DATABASE_URL={url}" in out
    code, out, _ = stack(capsys, "status", "--json")
    info = json.loads(out)
    assert code == 3  # Kafka is not running in this folder
    assert (info["postgres"]["url"], info["postgres"]["healthy"]) == (url, True)
    assert info["kafka"]["running"] is False and info["record"] == str(stack_dir / "stack.json")
    # ... and so do the test suite's connection settings
    from tests.conftest import stack_addresses

    assert stack_addresses()[0] == url

    # A variable naming another port does not move a running server: a warning, its port.
    other = free_port()
    monkeypatch.setenv("HOOKSTREAM_STACK_PG_PORT", str(other))
    code, out, err = stack(capsys, "status")
    assert f"127.0.0.1:{port}/hookstream  healthy" in out
    assert f"warning: HOOKSTREAM_STACK_PG_PORT={other} but this stack's server runs on " \
           f"{port}" in err
    code, out, err = stack(capsys, "up", "--only", "postgres")
    assert code == 1 and out == "" and err.count("\n") == 1
    assert f"already runs on port {port}, not {other}" in err

    # A server started before stacks kept a record (no stack.json) is not refused for it,
    # and is recorded now.
    monkeypatch.delenv("HOOKSTREAM_STACK_PG_PORT")
    (stack_dir / "stack.json").unlink()
    code, out, _ = stack(capsys, "up", "--only", "postgres")
    assert code == 0 and f"127.0.0.1:{port}/hookstream  healthy  (already running)" in out
    assert json.loads((stack_dir / "stack.json").read_text())["postgres"]["port"] == port

    # Stopped, it starts again on the port it had.
    assert stack(capsys, "down", "--only", "postgres")[1] == "postgres  stopped\n"
    code, out, _ = stack(capsys, "up", "--only", "postgres")
    assert code == 0 and f"127.0.0.1:{port}/hookstream" in out

    # --purge: the data and the record go (the ports are forgotten).
    code, out, _ = stack(capsys, "down", "--purge")
    assert code == 0 and "postgres  stopped" in out and "postgres  purged (" in out
    assert not (stack_dir / "pg").exists() and not (stack_dir / "logs").exists()
    assert not (stack_dir / "stack.json").exists()
    assert os.listdir(stack_dir) == [".lock"]


def test_purge_refuses_a_running_server(stack_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from hookstream.dev import localstack

    monkeypatch.setenv("HOOKSTREAM_STACK_PG_PORT", str(free_port()))
    assert stack(capsys, "up", "--only", "postgres")[0] == 0
    with pytest.raises(localstack.StackError, match="running; stop it first"):
        localstack.purge("postgres")
    assert (stack_dir / "pg" / "data" / "PG_VERSION").exists()


def test_a_port_in_use_is_one_line(stack_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("HOOKSTREAM_STACK_PG_PORT", str(port))
        code, out, err = stack(capsys, "up", "--only", "postgres")
    assert code == 1 and out == ""
    assert err == (f"hookstream: local stack: port 127.0.0.1:{port} is already in use by another"
                   " process; free it or set HOOKSTREAM_STACK_PG_PORT\n")
