"""The command line's one error style: one line on stderr naming what failed and what to
do, a non-zero exit, a traceback only with ``--debug``.

Exit codes (the same for every command):

- 1: the command ran and the answer is no (refused by the API or the database, not
  found, a gap found by ``reconcile``, a failed operation);
- 2: the command line or the configuration is wrong (fix it and run again);
- 3: something it needs cannot be reached: PostgreSQL, Kafka or the API (run again
  once it is back), or the local stack is not healthy.

Commands raise; ``describe`` turns what they raise into that line. Errors of the
project's own boundaries arrive already translated (``hookstream.io.pg``,
``hookstream.io.kafka``), so nothing here knows a driver's exception types.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from hookstream.cli.client import ApiRefused, ApiUnreachable
from hookstream.controlplane.errors import ApiError
from hookstream.core.settings import SettingsError
from hookstream.dev.localstack.paths import StackError
from hookstream.io.kafka import BrokerUnavailable
from hookstream.io.pg import DatabaseUnavailable, DataRejected

REFUSED = 1
USAGE = 2
UNREACHABLE = 3


class CommandError(Exception):
    """A failure the command explains itself: ``message`` is the whole line."""

    def __init__(self, message: str, exit_code: int = REFUSED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@dataclass(frozen=True)
class Explained:
    line: str
    exit_code: int


def database_target(url: str) -> str:
    """host:port/dbname of a database URL, never its password."""
    if "://" not in url:
        return "the configured database"
    parts = urlsplit(url)
    where = parts.hostname or "localhost"
    if parts.port:
        where += f":{parts.port}"
    return where + (parts.path or "")


def _first_line(text: str) -> str:
    return " ".join(text.strip().splitlines()[0].split()) if text.strip() else text


def _database_reason(message: str) -> str:
    # "OperationalError: connection failed: connection to server at "h", port 1 failed:
    # Connection refused" -> "Connection refused": the last clause says what happened.
    line = _first_line(message).split(": ", 1)[-1]
    return line.rsplit(" failed: ", 1)[-1]


def _kafka_reason(message: str) -> str:
    found = re.search(r'str="([^"]*)"', message)
    return found.group(1) if found else _first_line(message)


def describe(exc: BaseException, *, database_url: str, kafka_bootstrap: str,
             api_url: str) -> Explained | None:
    """The one line for ``exc``, or None for a bug (the caller says so, with its type)."""
    if isinstance(exc, CommandError):
        return Explained(exc.message, exc.exit_code)
    if isinstance(exc, SettingsError):
        return Explained(f"configuration error: {exc}", USAGE)
    if isinstance(exc, DatabaseUnavailable):
        return Explained(
            f"cannot use PostgreSQL at {database_target(database_url)}: "
            f"{_database_reason(str(exc))}; is it running (`hookstream stack status`)? "
            "Or point HOOKSTREAM_DATABASE_URL at the right server", UNREACHABLE)
    if isinstance(exc, DataRejected):
        return Explained(f"refused by the database: {_first_line(str(exc))}", REFUSED)
    if isinstance(exc, BrokerUnavailable):
        return Explained(
            f"cannot use Kafka at {kafka_bootstrap}: {_kafka_reason(str(exc))}; is it running "
            "(`hookstream stack status`)? Or point HOOKSTREAM_KAFKA_BOOTSTRAP at the right "
            "brokers", UNREACHABLE)
    if isinstance(exc, ApiUnreachable):
        return Explained(
            f"cannot reach the API at {api_url}: {exc.reason}; is the fanout (which serves it) "
            "running? Or point HOOKSTREAM_API_URL at it", UNREACHABLE)
    if isinstance(exc, ApiRefused):
        hint = {401: "; check HOOKSTREAM_API_KEY",
                403: "; this needs an operator key (hookstream apikeys create --operator)",
                503: "; retry once the database and Kafka are back"}.get(exc.status, "")
        code = UNREACHABLE if exc.status >= 500 else REFUSED
        return Explained(f"the API refused it ({exc.status} {exc.code}): {exc.message}{hint}",
                         code)
    if isinstance(exc, ApiError):  # the bootstrap commands share the API's validation
        return Explained(f"refused: {exc.message}", REFUSED)
    if isinstance(exc, StackError):
        more = "; the server's log is in the traceback (--debug)" \
            if len(str(exc).strip().splitlines()) > 1 else ""
        return Explained(f"local stack: {_first_line(str(exc))}{more}", REFUSED)
    return None
