"""Tables, key: value blocks, the progress bar and the one-line failures (pure)."""

from __future__ import annotations

import io

from hookstream.cli import output
from hookstream.cli.client import ApiRefused, ApiUnreachable
from hookstream.cli.failures import database_target, describe
from hookstream.cli.progress import Progress, bar
from hookstream.core.settings import SettingsError
from hookstream.io.kafka import BrokerUnavailable
from hookstream.io.pg import DatabaseUnavailable

TARGETS = {"database_url": "postgresql://u:pw@db.internal:5432/hs",
           "kafka_bootstrap": "k1:9092", "api_url": "http://api:8080"}


def test_cells() -> None:
    assert output.cell(None) == "-" and output.cell(True) == "yes" and output.cell(2.0) == "2"
    assert output.cell(["a.*", "b"]) == "a.*,b"
    assert output.cell("2026-12-01T15:38:02.123456+00:00") == "2026-12-01 15:38:02Z"
    assert output.cell("x" * 100) == "x" * 59 + "…" and output.cell("x" * 100, None) == "x" * 100
    assert output.cell("two\nlines") == "two lines"


def test_a_table_aligns_and_keeps_the_last_column_whole() -> None:
    rows = [{"id": "a", "why": "short"}, {"id": "bbbb", "why": "y" * 80}]
    text = output.table(rows, [("id", output.field("id")), ("why", output.field("why"))])
    assert text.splitlines() == ["ID    WHY", "a     short", "bbbb  " + "y" * 80]
    nested = output.field("progress.total")
    assert nested({"progress": {"total": 3}}) == 3 and nested({"progress": None}) is None


def test_a_block() -> None:
    text = output.block({"id": "x", "n": None}, [("id", output.field("id")),
                                                  ("longer name", output.field("n"))])
    assert text == "id:          x\nlonger name: -"


def test_the_progress_bar() -> None:
    assert bar(0, 10, 10) == "[..........]  0/10   0%"
    assert bar(5, 10, 10) == "[#####.....]  5/10  50%"
    assert bar(0, 0, 4) == "[####] 0/0 100%"
    out = io.StringIO()
    clock = iter([0.0, 1.0, 6.0, 7.0]).__next__
    p = Progress(out, quiet_s=5, clock=clock)
    p.update("replay running", 1, 4)  # first: shown
    p.update("replay running", 2, 4)  # 1 s later: held back (not a terminal)
    p.update("replay running", 3, 4)  # 6 s: shown
    p.finish("replay succeeded", 4, 4)
    assert [line.split(" [")[0] + " " + line.split("] ")[1] for line in
            out.getvalue().splitlines()] == ["replay running 1/4  25%", "replay running 3/4  75%",
                                             "replay succeeded 4/4 100%"]


def test_failures_are_one_line_without_secrets() -> None:
    assert database_target(TARGETS["database_url"]) == "db.internal:5432/hs"
    assert database_target("host=x password=y") == "the configured database"
    db = describe(DatabaseUnavailable(
        'OperationalError: connection failed: connection to server at "10.0.0.5", port 5432 '
        "failed: Connection refused\n\tIs the server running on that host?"), **TARGETS)
    assert db is not None and db.exit_code == 3
    assert db.line.startswith("cannot use PostgreSQL at db.internal:5432/hs: Connection refused;")
    assert "pw" not in db.line and "\n" not in db.line
    kafka = describe(BrokerUnavailable("no answer within 5 s (Local: Broker transport failure)"),
                     **TARGETS)
    assert kafka is not None and kafka.exit_code == 3 and "Kafka at k1:9092" in kafka.line
    api = describe(ApiUnreachable("http://api:8080", "connection refused"), **TARGETS)
    assert api is not None and api.exit_code == 3 and "HOOKSTREAM_API_URL" in api.line
    refused = describe(ApiRefused(409, "conflict", "delivery is pending"), **TARGETS)
    assert refused is not None and refused.exit_code == 1
    assert refused.line == "the API refused it (409 conflict): delivery is pending"
    config = describe(SettingsError("a variable is not a hookstream setting"), **TARGETS)
    assert config is not None and config.exit_code == 2
    assert describe(ZeroDivisionError("bug"), **TARGETS) is None
