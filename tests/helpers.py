from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from hookstream.harness import ServiceProcess

T = TypeVar("T")


def wait_until(fn: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.1,
               message: str = "condition") -> T:
    """Poll ``fn`` until it returns something truthy; fail with the last value otherwise."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"{message} not reached within {timeout_s}s (last: {last!r})")


def query(db_url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(sql, params).fetchall()


def scalar(db_url: str, sql: str, params: Any = None) -> Any:
    rows = query(db_url, sql, params)
    return rows[0][0] if rows else None


def stop_cleanly(*services: ServiceProcess) -> None:
    """SIGTERM each; each must drain and exit 0 within the harness's bound (or have been
    SIGKILLed on purpose with ``kill()``)."""
    problems = []
    for s in services:
        s.terminate()
        if (problem := s.exit_problem()) is not None:
            problems.append(problem)
    assert not problems, "\n\n".join(problems)
