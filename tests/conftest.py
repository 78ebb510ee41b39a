"""Fixtures on the real stack: a fresh database per test cloned from a migrated template,
and a fresh topic prefix per test. A missing broker or database fails the run; it never
turns into a skip."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from hookstream.core.topics import Topics
from hookstream.io.kafka import delete_topics, ensure_topics
from hookstream.ops.migrate import migrate


def stack_addresses() -> tuple[str, str]:
    """(database URL, Kafka bootstrap) of the servers the tests use: the ones the
    environment names explicitly (HOOKSTREAM_DATABASE_URL, HOOKSTREAM_KAFKA_BOOTSTRAP), else
    the local stack's own, as it recorded them (HOOKSTREAM_STACK_DIR and its ports are all
    a private stack needs)."""
    from hookstream.dev import localstack

    recorded = localstack.env()
    return (os.environ.get("HOOKSTREAM_DATABASE_URL") or recorded["HOOKSTREAM_DATABASE_URL"],
            os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP") or recorded["HOOKSTREAM_KAFKA_BOOTSTRAP"])


@dataclass(frozen=True)
class Stack:
    admin_url: str  # a database on the server we may CREATE DATABASE from
    bootstrap: str

    def url_for(self, dbname: str) -> str:
        return self.admin_url.rsplit("/", 1)[0] + "/" + dbname


@pytest.fixture(scope="session")
def stack() -> Stack:
    s = Stack(*stack_addresses())
    try:
        with psycopg.connect(s.admin_url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL not reachable at {s.admin_url} (run `hookstream stack up`): {exc}")
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({"bootstrap.servers": s.bootstrap}).list_topics(timeout=15)
    except Exception as exc:
        pytest.fail(f"Kafka not reachable at {s.bootstrap} (run `hookstream stack up`): {exc}")
    return s


@pytest.fixture(scope="session")
def template_db(stack: Stack) -> Iterator[str]:
    name = f"hs_template_{os.getpid()}"
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    migrate(stack.url_for(name))
    yield name
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db_url(stack: Stack, template_db: str) -> Iterator[str]:
    name = f"hs_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template_db}")
    yield stack.url_for(name)
    with psycopg.connect(stack.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def topics(stack: Stack) -> Iterator[Topics]:
    t = Topics(f"t{uuid.uuid4().hex[:10]}")
    ensure_topics(stack.bootstrap, t.specs(partitions=3))
    yield t
    delete_topics(stack.bootstrap, [s.name for s in t.specs()])


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tiers first (fault tests, then end to end, integration, unit; the order
    within a tier kept): pytest-xdist hands tests out in this order, so the minutes-long
    fault tests start at once instead of running alone at the end of the run."""
    def tier(item: pytest.Item) -> int:
        for rank, marker in enumerate(("faults", "e2e", "browser", "integration")):
            if item.get_closest_marker(marker) is not None:
                return rank
        return 4

    items.sort(key=tier)
