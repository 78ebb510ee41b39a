from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from hookstream.controlplane import store
from hookstream.core.topics import Topics
from hookstream.dev.harness import Pipeline, pipeline_env
from hookstream.dev.receiver import Behaviour, Receiver, ReceiverThread
from hookstream.endpoints import create_endpoint
from tests.conftest import Stack


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = ReceiverThread(r).start()
    yield r
    thread.stop()


StartPipeline = Callable[..., Pipeline]


@pytest.fixture
def start_pipeline(stack: Stack, db_url: str, topics: Topics,
                   log_dir: Path) -> Iterator[StartPipeline]:
    """Start relay + fanout + dispatcher(s) as processes with extra HOOKSTREAM_* settings
    (keyword arguments, lower-case, without the prefix; ``allow_private_targets`` is true
    unless given) and ``env``, variables passed as they are. Stopped with SIGTERM at the
    end: every service must drain and exit 0 within the harness's bound, except one a test
    SIGKILLed with ``kill()`` and did not start again (that one is expected to be -9)."""
    started: list[Pipeline] = []

    def start(dispatchers: int = 1, env: dict[str, str] | None = None, *,
              relays: int = 1, fanouts: int = 1, **settings: str) -> Pipeline:
        full = pipeline_env(database_url=db_url, bootstrap=stack.bootstrap,
                            topic_prefix=topics.prefix,
                            **{"allow_private_targets": "true", **settings})
        p = Pipeline({**full, **(env or {})}, log_dir, dispatchers=dispatchers,
                     relays=relays, fanouts=fanouts).start()
        started.append(p)
        return p

    yield start
    problems = []
    for p in started:
        p.stop()
        problems += p.exit_problems()
    assert not problems, "\n\n".join(problems)


@pytest.fixture
def pipeline(start_pipeline: StartPipeline) -> Pipeline:
    return start_pipeline()


def add_endpoint(db_url: str, receiver: Receiver, name: str, tenant: str,
                 types: list[str] | None = None, behaviour: Behaviour | None = None,
                 **limits: float) -> str:
    with psycopg.connect(db_url) as conn:
        ep = create_endpoint(conn, tenant=tenant, url=receiver.url(name),
                             event_types=types or ["*"], allow_insecure=True, **limits)  # type: ignore[arg-type]
    receiver.add(name, ep.secret, behaviour)
    return str(ep.endpoint_id)


def api_call(port: int, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    """One request to the control-plane API that the fanout process serves on ``port``
    (start the pipeline with ``api_port=str(port)``)."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def tenant_key(db_url: str, tenant: str = "acme") -> str:
    """Create ``tenant`` and an API key of it; returns the key's token."""
    async def make() -> str:
        async with await psycopg.AsyncConnection.connect(db_url, row_factory=dict_row) as conn:
            await store.create_tenant(conn, tenant, tenant.title())
            _, token = await store.create_api_key(conn, tenant, "e2e")
            await conn.commit()
            return token

    return asyncio.run(make())
