"""The one place that knows psycopg's error types: every PostgreSQL boundary translates
driver errors into these two, so nothing above it decides on a driver class.

* ``DatabaseUnavailable``: the server or the connection failed (restart, network, pool
  exhausted, a failover's read-only window); the same call may succeed later, and
  callers retry it.
* ``DataRejected``: the server refused these values (a NUL in text, a constraint); the
  same call will fail again however often it is retried, so callers must not loop on it:
  they isolate the offending row and record it instead.

Anything else psycopg raises (a syntax error, an undefined column, a transaction used
wrongly) is a bug in hookstream, not an outage: it passes through untranslated so the
service stops and says so, instead of backing off and retrying it forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ParamSpec, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool

P = ParamSpec("P")
R = TypeVar("R")


class DatabaseUnavailable(RuntimeError):
    """PostgreSQL could not be reached or the connection broke (transient)."""


class DataRejected(ValueError):
    """PostgreSQL refused the data itself (permanent for these values)."""


_PERMANENT = (psycopg.DataError, psycopg.IntegrityError)
# OperationalError covers a lost or refused connection, a server shutting down or in
# recovery, a cancelled statement, a deadlock or serialization failure; InterfaceError is
# what psycopg raises on a connection the server already closed. A read-only transaction
# is a failover's window (connected to a standby that is not promoted yet).
_TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError,
              psycopg.errors.ReadOnlySqlTransaction, psycopg_pool.PoolTimeout, OSError)
_DRIVER = (psycopg.Error, psycopg_pool.PoolTimeout, OSError)


# Every service connection's bounds for a network that stops answering without a reset
# (packets dropped by a firewall, a partition, a dead host): a connect gives up after
# connect_timeout; a statement whose bytes go unacknowledged fails after
# tcp_user_timeout (ms; Linux) instead of TCP's ~15 minutes of retransmission; an idle
# connection is found dead by keepalives within ~25 s. Each failure is an
# OperationalError, so DatabaseUnavailable: retried, /healthz red (issue #47). A slow
# statement is not cut short: the server acknowledged its bytes.
NETWORK_BOUNDS: dict[str, Any] = {
    "connect_timeout": 5, "tcp_user_timeout": 10_000, "keepalives": 1,
    "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3}
# A pool's reconnection attempts back off exponentially (1, 2, 4 … s) for up to this long
# before the pool gives the slot up and makes a new connection when a client next asks:
# after two minutes of failures the default (5 minutes) had its next attempt a minute
# away, long after the network was back.
POOL_RECONNECT_S = 10.0


def translate(exc: BaseException) -> BaseException:
    """The project's error for a driver (or socket) error; anything else unchanged."""
    if isinstance(exc, _PERMANENT):
        return DataRejected(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, _TRANSIENT):
        return DatabaseUnavailable(f"{type(exc).__name__}: {exc}")
    return exc


@contextlib.contextmanager
def translating() -> Iterator[None]:
    """Raise the project's errors for driver errors inside the block (sync code)."""
    try:
        yield
    except _DRIVER as exc:
        mapped = translate(exc)
        if mapped is exc:
            raise
        raise mapped from exc


def translated(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorate a boundary coroutine so it raises only the project's errors."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            with translating():
                return await fn(*args, **kwargs)
        except (DatabaseUnavailable, DataRejected):
            # A task cancelled while a statement runs on a broken connection gets the
            # driver's error, not CancelledError: translated, the callers' retry loops
            # would swallow the cancellation and a SIGTERM would wait for them forever
            # (seen with PostgreSQL's packets dropped, issue #47). The cancellation wins.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise asyncio.CancelledError from None
            raise

    return call


def translated_sync(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a boundary function (sync code) so it raises only the project's errors."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        with translating():
            return fn(*args, **kwargs)

    return call


# The history's batch statements name their days as ``committed_at = ANY(array)`` (0014).
# PostgreSQL prunes partitions by an array only when it plans with the array's values; a
# generic plan cannot, and probes every day's partition for every row of the batch.
# psycopg prepares a statement on its fifth run, and for a batch of a few hundred rows
# the server then settles on the generic plan (it prices an array parameter of unknown
# length as short, so the plan made with the values looks dearer). A generic plan also
# outlives the statistics it was made from: one planned while today's attempts were a
# few thousand rows read them whole on every call as the day grew. Saturated, that was
# 156 buffers per delivery in the outcomes statement against 34 before partitioning.
# Planning each call costs ~1.4 ms for a claim of 300 (EXPLAIN (ANALYZE, SUMMARY) on an
# empty database; benchmarks/batch_statements.py prints a claim's planning); the
# services that run such batches set this on every connection.
PLAN_WITH_VALUES = "SET plan_cache_mode = force_custom_plan"


def plan_with_values(conn: psycopg.Connection[Any]) -> None:
    """Make ``conn`` plan every statement with its parameters' values (see above)."""
    conn.execute(PLAN_WITH_VALUES)


async def plan_with_values_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """``plan_with_values`` for an asyncio connection (a pool's ``configure``)."""
    await conn.execute(PLAN_WITH_VALUES)
