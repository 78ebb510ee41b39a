"""The one place that knows psycopg's error types: every PostgreSQL boundary translates
driver errors into these two, so nothing above it decides on a driver class.

* ``DatabaseUnavailable``: the server or the connection failed (restart, network, pool
  exhausted); the same call may succeed later, and callers retry it.
* ``DataRejected``: the server refused these values (a NUL in text, a constraint); the
  same call will fail again however often it is retried, so callers must not loop on it:
  they isolate the offending row and record it instead.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

import psycopg
import psycopg_pool

P = ParamSpec("P")
R = TypeVar("R")


class DatabaseUnavailable(RuntimeError):
    """PostgreSQL could not be reached or the connection broke (transient)."""


class DataRejected(ValueError):
    """PostgreSQL refused the data itself (permanent for these values)."""


_PERMANENT = (psycopg.DataError, psycopg.IntegrityError)


def translate(exc: BaseException) -> BaseException:
    """The project's error for a driver (or socket) error; anything else unchanged."""
    if isinstance(exc, _PERMANENT):
        return DataRejected(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, psycopg.Error | psycopg_pool.PoolTimeout | OSError):
        return DatabaseUnavailable(f"{type(exc).__name__}: {exc}")
    return exc


def translated(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Decorate a boundary coroutine so it raises only the project's errors."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except (psycopg.Error, psycopg_pool.PoolTimeout, OSError) as exc:
            raise translate(exc) from exc

    return call
