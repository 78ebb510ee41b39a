"""The bootstrap commands against a real database: tenants and keys, as JSON for scripts and
as tables for people; the keys they print are the ones the API accepts; a database that
cannot be reached is one line and exit 3, in seconds."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import orjson
import pytest

from hookstream.cli import main as cli_main
from hookstream.controlplane.auth import hash_token
from tests.helpers import query


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    """The command with --json: its output parsed, or its stderr when it failed."""
    code = cli_main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, orjson.loads(out) if code == 0 else err


@pytest.fixture(autouse=True)
def database(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKSTREAM_DATABASE_URL", db_url)


def test_bootstrap_tenant_and_keys(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, made = run(capsys, "tenants", "create", "acme", "--name", "Acme Inc")
    assert code == 0 and made["tenant"]["id"] == "acme"
    token = made["api_key"]["token"]
    assert query(db_url, "SELECT tenant FROM api_keys WHERE key_sha256 = %s",
                 (hash_token(token),)) == [("acme",)]
    code, op = run(capsys, "apikeys", "create", "--operator", "--name", "root")
    assert code == 0 and op["operator"] is True and op["token"].startswith("hsk_")
    code, err = run(capsys, "tenants", "create", "acme")
    assert code == 1 and err == "hookstream: refused: tenant 'acme' already exists\n"
    code, err = run(capsys, "tenants", "create", "Not Valid")
    assert code == 1 and "id" in err and err.count("\n") == 1
    code, err = run(capsys, "apikeys", "create", "--tenant", "ghost")
    assert code == 1 and "unknown tenant" in err
    code, keys = run(capsys, "apikeys", "list")
    assert {k["operator"] for k in keys} == {True, False} and all("token" not in k for k in keys)
    code, revoked = run(capsys, "apikeys", "revoke", op["id"])
    assert code == 0 and revoked["revoked_at"]
    code, listed = run(capsys, "tenants", "list")
    assert [t["id"] for t in listed] == ["acme"]


def test_tables_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["tenants", "create", "acme", "--name", "Acme Inc"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tenant acme created\napi key ") and "token:   hsk_" in out
    assert "shown once" in out
    assert cli_main(["tenants", "create", "globex", "--no-key"]) == 0
    assert capsys.readouterr().out == "tenant globex created\n"
    assert cli_main(["tenants", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "CREATED"]
    assert [line.split()[0] for line in lines[1:]] == ["acme", "globex"]
    assert cli_main(["apikeys", "list", "--operator"]) == 0
    assert capsys.readouterr().out == "no API keys\n"
    assert cli_main(["apikeys", "list"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:3] == ["ID", "TENANT", "NAME"] and " acme " in rows[1]


def test_an_unreachable_database_is_one_line_in_seconds(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # A port nobody listens on, and an address nothing answers (a connect timeout).
    monkeypatch.setenv("HOOKSTREAM_DATABASE_URL", "postgresql://hookstream:s3cret@127.0.0.1:9/x")
    for argv in (["tenants", "list"], ["migrate"], ["reconcile"]):
        started = time.monotonic()
        assert cli_main(argv) == 3, argv
        out, err = capsys.readouterr()
        assert time.monotonic() - started < 5
        assert out == "" and err.count("\n") == 1, err
        assert err.startswith("hookstream: cannot use PostgreSQL at 127.0.0.1:9/x: ")
        assert "s3cret" not in err and "hookstream stack status" in err


def test_debug_prints_the_traceback() -> None:
    env_url = "postgresql://hookstream@127.0.0.1:9/x"
    plain = subprocess.run([sys.executable, "-m", "hookstream.cli", "migrate"],
                           capture_output=True, text=True, timeout=60,
                           env={"HOOKSTREAM_DATABASE_URL": env_url, "PATH": "/usr/bin:/bin"})
    assert plain.returncode == 3 and "Traceback" not in plain.stderr
    assert plain.stderr.count("\n") == 1
    debug = subprocess.run([sys.executable, "-m", "hookstream.cli", "migrate", "--debug"],
                           capture_output=True, text=True, timeout=60,
                           env={"HOOKSTREAM_DATABASE_URL": env_url, "PATH": "/usr/bin:/bin"})
    assert debug.returncode == 3 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.rstrip().splitlines()[-1] == plain.stderr.rstrip()
