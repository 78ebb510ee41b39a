from __future__ import annotations

from pathlib import Path

import pytest

from hookstream.io import queries


def test_parse_named_blocks() -> None:
    q = queries.parse("-- preamble\n-- name: a\nSELECT 1\n\n-- name: b\n-- why\nSELECT 2\n")
    assert q == {"a": "SELECT 1", "b": "-- why\nSELECT 2"}


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")


@pytest.mark.parametrize("concern", ["relay", "fanout", "dispatcher"])
def test_shipped_files_load(concern: str) -> None:
    assert queries.load(concern)


# every named-query file that ships, so a new one is checked without being listed here
SHIPPED = sorted(p.stem for p in (Path(queries.__file__).parent / "sql").glob("*.sql"))


@pytest.mark.parametrize("concern", SHIPPED)
def test_no_stray_percent_signs(concern: str) -> None:
    # psycopg reads every % as a placeholder, even in a comment: one stray "5 %" in a
    # comment stopped every claim (found by the e2e tests, guarded here).
    import re

    for name, text in queries.load(concern).items():
        # placeholders: %(name)s, and %s / %b / %t where a file passes positional values
        assert not re.search(r"%(?![(sbt])", text.replace("%%", "")), \
            f"{concern}.{name}: stray %"


def test_the_fanouts_one_statement_creates_rows_as_create_deliveries_does() -> None:
    # store_and_create repeats create_deliveries' endpoint match and insert (SQL has no
    # include): a rule changed in one and not the other would fan out differently
    # depending on which path a batch took.
    fanout = queries.load("fanout")

    def creating(sql: str) -> str:
        part = sql[sql.index("m AS MATERIALIZED ("):sql.index("RETURNING delivery_id")]
        return part.replace("c.event_id, c.again, ", "c.event_id, ")

    assert creating(fanout["store_and_create"]) == creating(fanout["create_deliveries"])


def _sql_only(text: str) -> str:
    """The statement without its comments, one space between words."""
    import re

    lines = (re.sub(r"--.*$", "", line) for line in text.splitlines())
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def test_the_first_attempts_claim_is_the_claim_without_its_takeover_update() -> None:
    # claim_first repeats claim without abandoned (SQL has no include): a condition
    # changed in one and not the other would claim first attempts differently.
    dispatcher = queries.load("dispatcher")
    claim = _sql_only(dispatcher["claim"])
    start = claim.index(", abandoned AS (")
    end = claim.index(" SELECT c.delivery_id")
    assert "UPDATE attempts" in claim[start:end]
    assert _sql_only(dispatcher["claim_first"]) == claim[:start] + claim[end:]
