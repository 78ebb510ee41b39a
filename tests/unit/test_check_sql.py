"""scripts/check_sql.py: SQL run or written outside a store module is reported with its
file and line; the same code in a ``*store`` module (or an allowlisted one) passes, and
prose, docstrings and ``dict.copy()`` are not SQL."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.source_trees import run_check, write_tree

RUNS_SQL = '''\
"""SELECT rows FROM somewhere: a docstring is prose, never SQL."""

import psycopg


def count(conn: psycopg.Connection) -> int:
    row = conn.execute(
        "SELECT count(*) FROM deliveries WHERE status = %s", ("pending",)).fetchone()
    return row[0]
'''

HOLDS_SQL = '''\
def statement(table: str) -> str:
    return f"DROP TABLE IF EXISTS {table}_old"


QUERY = """
    -- the pending head
    WITH head AS (SELECT 1) SELECT * FROM head
"""
'''

PROSE = '''\
"""Delete from the queue what was sent; select an endpoint, update it."""

HELP = "Delete from the queue what was sent"
TITLE = "SELECT"  # a word, not a statement
MESSAGE = "Create a table of the endpoints (see docs)"


def copy(d: dict[str, int]) -> dict[str, int]:
    """INSERT INTO the docs: still a docstring."""
    return d.copy()


class Settings:
    """UPDATE endpoints SET ...: a class docstring."""
'''


def tree(root: Path, files: dict[str, str]) -> Path:
    return write_tree(root, {"src/hookstream/__init__.py": "",
                             "services/relay/__init__.py": "", **files})


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return run_check("check_sql.py", root)


def test_sql_in_a_module_that_is_not_a_store_fails(tmp_path: Path) -> None:
    done = check(tree(tmp_path, {"src/hookstream/ops/counts.py": RUNS_SQL}))
    assert done.returncode == 1, done.stdout
    lines = done.stdout.splitlines()
    assert "src/hookstream/ops/counts.py:7: .execute() outside a store" in lines
    assert any(line.startswith("src/hookstream/ops/counts.py:8: SQL text outside a store: "
                               "'SELECT count(*) FROM deliveries") for line in lines)
    assert len(lines) == 3  # two findings and the summary: the docstring is not one
    assert lines[-1].startswith("2 place(s) with SQL outside a store, in 1 module(s)")


@pytest.mark.parametrize("name", ["src/hookstream/ops/counts_store.py",
                                  "src/hookstream/ops/store.py",
                                  "services/relay/outbox_store.py"])
def test_the_same_in_a_store_passes(tmp_path: Path, name: str) -> None:
    done = check(tree(tmp_path, {name: RUNS_SQL + HOLDS_SQL}))
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("SQL only in stores: 3 modules of src/hookstream and "
                                  "services/*, 1 of them stores (0 by the allowlist)")


def test_sql_text_is_found_in_services_and_f_strings_and_after_comments(tmp_path: Path) -> None:
    done = check(tree(tmp_path, {"services/relay/house.py": HOLDS_SQL,
                                 "services/relay/copying.py": (
                                     "def load(cur):\n"
                                     "    with cur.copy(statement) as copy:\n"
                                     "        copy.write_row((1,))\n"
                                     "    cur.executemany(statement, [])\n")}))
    assert done.returncode == 1
    found = [line.split(": ", 1)[0] for line in done.stdout.splitlines()[:-1]]
    assert found == ["services/relay/copying.py:2", "services/relay/copying.py:4",
                     "services/relay/house.py:2", "services/relay/house.py:5"]
    assert "'DROP TABLE IF EXISTS x_old'" in done.stdout
    assert ".copy() outside a store" in done.stdout
    assert ".executemany() outside a store" in done.stdout


def test_prose_docstrings_and_dict_copy_are_not_sql(tmp_path: Path) -> None:
    done = check(tree(tmp_path, {"src/hookstream/cli/words.py": PROSE}))
    assert done.returncode == 0, done.stdout


def test_an_allowlisted_module_passes(tmp_path: Path) -> None:
    done = check(tree(tmp_path, {"src/hookstream/ops/migrate.py": RUNS_SQL}))
    assert done.returncode == 0, done.stdout
    assert "(1 by the allowlist)" in done.stdout
