"""hookstream.io.pg: which driver errors are an outage (retried), which are bad data
(isolated, never retried) and which are bugs (passed through, so the service stops)."""

from __future__ import annotations

import asyncio

import psycopg
import psycopg.errors
import psycopg_pool
import pytest

from hookstream.io.pg import DatabaseUnavailable, DataRejected, translated, translated_sync


@pytest.mark.parametrize("exc", [
    psycopg.OperationalError("connection refused"),
    psycopg.InterfaceError("the connection is closed"),
    psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    psycopg.errors.CannotConnectNow("the database system is starting up"),
    psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    psycopg.errors.DeadlockDetected("deadlock detected"),
    psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
    psycopg_pool.PoolTimeout("couldn't get a connection after 30 sec"),
    ConnectionResetError("reset by peer"),
])
def test_outages_are_database_unavailable(exc: BaseException) -> None:
    @translated_sync
    def call() -> None:
        raise exc

    with pytest.raises(DatabaseUnavailable) as got:
        call()
    assert got.value.__cause__ is exc


@pytest.mark.parametrize("exc", [
    psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence"),
    psycopg.errors.CharacterNotInRepertoire("invalid byte sequence for encoding UTF8"),
    psycopg.errors.UniqueViolation("duplicate key value"),
    psycopg.errors.NumericValueOutOfRange("integer out of range"),
])
def test_refused_values_are_data_rejected(exc: BaseException) -> None:
    @translated_sync
    def call() -> None:
        raise exc

    with pytest.raises(DataRejected):
        call()


@pytest.mark.parametrize("exc", [
    psycopg.errors.UndefinedColumn('column "nope" does not exist'),
    psycopg.errors.SyntaxError("syntax error at or near"),
    psycopg.errors.InFailedSqlTransaction("current transaction is aborted"),
    KeyError("not a driver error"),
])
def test_bugs_pass_through_untranslated(exc: BaseException) -> None:
    # Retrying a syntax error forever would look like an outage that never ends.
    @translated_sync
    def call() -> None:
        raise exc

    with pytest.raises(type(exc)) as got:
        call()
    assert got.value is exc


async def test_the_async_decorator_translates_the_same_way() -> None:
    @translated
    async def down() -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    @translated
    async def bug() -> None:
        raise psycopg.errors.UndefinedTable('relation "x" does not exist')

    with pytest.raises(DatabaseUnavailable):
        await down()
    with pytest.raises(psycopg.errors.UndefinedTable):
        await bug()


async def test_a_cancelled_task_is_cancelled_whatever_the_driver_raised() -> None:
    # Issue #47: cancelled while its statement waited on a connection whose packets were
    # dropped, a task got the driver's error; translated, its retry loop swallowed the
    # cancellation and the dispatcher's SIGTERM waited for it forever.
    entered = asyncio.Event()

    @translated
    async def statement() -> None:
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            raise psycopg.OperationalError("consuming input failed") from None

    async def retrying() -> None:
        while True:  # as Durable._retried does
            try:
                await statement()
            except DatabaseUnavailable:
                continue

    task = asyncio.create_task(retrying())
    await entered.wait()
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.cancelled()


async def test_a_driver_error_without_cancellation_is_still_translated() -> None:
    @translated
    async def statement() -> None:
        raise psycopg.OperationalError("consuming input failed")

    with pytest.raises(DatabaseUnavailable):
        await statement()
