"""``migrate --wait`` and ``topics --wait``: started before their server (containers start
in any order), they keep trying, one line per try, and succeed once it answers; past the
bound they fail as they would without waiting. The server that "comes up late" is the
real PostgreSQL behind a port that starts forwarding to it only after the first try."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator

import pytest

from tests.integration.test_cli_failures import hookstream


class LateForwarder:
    """A loopback port that refuses connections until ``open()``, then forwards each one
    to ``target`` (host, port)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as s:  # a port nobody listens on until open()
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._server: socket.socket | None = None

    def open(self) -> None:
        self._server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
def late_postgres(db_url: str) -> Iterator[tuple[LateForwarder, str]]:
    url = urllib.parse.urlsplit(db_url)
    forwarder = LateForwarder((url.hostname or "127.0.0.1", url.port or 5432))
    late_url = url._replace(netloc=f"{url.username}@127.0.0.1:{forwarder.port}").geturl()
    yield forwarder, late_url
    forwarder.close()


def hookstream_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}


def _env(db_url: str) -> dict[str, str]:
    return {"HOOKSTREAM_DATABASE_URL": db_url}


def test_migrate_waits_for_a_database_that_comes_up_late(
        late_postgres: tuple[LateForwarder, str]) -> None:
    forwarder, url = late_postgres
    proc = subprocess.Popen([sys.executable, "-m", "hookstream.cli", "migrate", "--wait", "60"],
                            env={**hookstream_env(), **_env(url)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()  # the first failed try, said at once
    assert first.startswith("hookstream: PostgreSQL not reachable yet ("), first
    assert "trying again in 0.5 s (0 of 60 s waited)" in first
    forwarder.open()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.startswith("migrations applied: ")


def test_migrate_gives_up_after_its_wait_like_without_one(
        late_postgres: tuple[LateForwarder, str]) -> None:
    _, url = late_postgres
    started = time.monotonic()
    done = hookstream("migrate", "--wait", "2", env=_env(url), timeout_s=60)
    took = time.monotonic() - started
    assert done.returncode == 3, done
    lines = done.stderr.splitlines()
    assert [line.split(" (")[0] for line in lines[:-1]] == [
        "hookstream: PostgreSQL not reachable yet"] * 3  # after 0.5, 1 and 0.5 s
    assert lines[-1].startswith("hookstream: "), lines[-1]
    assert "not reachable yet" not in lines[-1]
    assert 2 <= took < 20, took


def test_topics_waits_then_fails_in_one_line_per_try() -> None:
    done = hookstream("topics", "--wait", "1", env={"HOOKSTREAM_KAFKA_BOOTSTRAP": "127.0.0.1:9"},
                      timeout_s=60)
    assert done.returncode == 3
    lines = done.stderr.splitlines()
    assert len(lines) == 3 and "%" not in done.stderr, done.stderr  # 2 waits + the failure
    assert all(line.startswith("hookstream: Kafka not reachable yet (") for line in lines[:2])
    assert lines[2].startswith("hookstream: cannot use Kafka at 127.0.0.1:9")


def test_a_bad_wait_is_a_usage_error() -> None:
    done = hookstream("migrate", "--wait", "soon", env={}, timeout_s=30)
    assert done.returncode == 2 and "must be a number of seconds" in done.stderr

