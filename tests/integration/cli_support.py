"""Fixtures of the command-line tests that talk to the API (this module has no tests).

The API is the real server (``hookstream.api.server.ApiServer``: aiohttp on loopback, on
its own thread and loop, as the fanout runs it) against a fresh database and topics of
its own on the real Kafka; the commands run in-process (``hookstream.cli.main``) with
``HOOKSTREAM_API_URL`` and ``HOOKSTREAM_API_KEY`` pointing at it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
import pytest
from psycopg.rows import dict_row

from hookstream.api.server import ApiServer
from hookstream.cli import main as cli_main
from hookstream.controlplane import store
from hookstream.core.topics import Topics
from tests.conftest import Stack
from tests.integration.test_api_support import api_settings


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, (self.code, self.err)
        return orjson.loads(self.out)


@dataclass
class Served:
    url: str
    db_url: str
    bootstrap: str
    topics: Topics
    server: ApiServer
    capsys: pytest.CaptureFixture[str]
    monkeypatch: pytest.MonkeyPatch
    keys: dict[str, str] = field(default_factory=dict)  # "operator", "acme", "globex"

    def run(self, *argv: str, key: str | None = "acme") -> Result:
        """``hookstream <argv>`` with ``key``'s token (a name in ``keys``, or a raw token)."""
        self.capsys.readouterr()
        self.monkeypatch.setenv("HOOKSTREAM_API_URL", self.url)
        if key is None:
            self.monkeypatch.delenv("HOOKSTREAM_API_KEY", raising=False)
        else:
            self.monkeypatch.setenv("HOOKSTREAM_API_KEY", self.keys.get(key, key))
        code = cli_main(list(argv))
        out, err = self.capsys.readouterr()
        return Result(code, out, err)

    def json(self, *argv: str, key: str | None = "acme") -> Any:
        return self.run(*argv, "--json", key=key).json()

    def refused(self, *argv: str, key: str | None = "acme", code: int = 1) -> str:
        """Run a command that must fail: exit ``code``, one line on stderr, nothing on
        stdout; returns that line."""
        result = self.run(*argv, key=key)
        assert result.code == code, result
        assert result.out == "" and result.err.count("\n") == 1, result
        assert result.err.startswith("hookstream: ") and "Traceback" not in result.err
        return result.err.strip()


async def _keys(db_url: str) -> dict[str, str]:
    keys: dict[str, str] = {}
    async with await psycopg.AsyncConnection.connect(db_url, row_factory=dict_row) as conn:
        _, keys["operator"] = await store.create_api_key(conn, None, "ops")
        for tenant in ("acme", "globex"):
            await store.create_tenant(conn, tenant, tenant.title())
            _, keys[tenant] = await store.create_api_key(conn, tenant, "cli")
        await conn.commit()
    return keys


@pytest.fixture(name="served")
def served_fixture(stack: Stack, db_url: str, topics: Topics, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    settings = api_settings(db_url, stack.bootstrap, topics.prefix, operation_batch_size=2)
    server = ApiServer(settings).start()
    try:
        yield Served(f"http://127.0.0.1:{server.port}", db_url, stack.bootstrap, topics, server,
                     capsys, monkeypatch, asyncio.run(_keys(db_url)))
    finally:
        server.stop()
