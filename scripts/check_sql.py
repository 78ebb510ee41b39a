#!/usr/bin/env python3
"""SQL only in stores: outside the store modules, no module of the shipped code runs SQL or
holds SQL text. Every ``.py`` under ``src/hookstream`` and ``services/*`` is parsed with
``ast``; in a module that is not a store, each of these is a finding:

- a call of ``.execute(...)`` or ``.executemany(...)`` on anything (a connection, a
  cursor, a pool's connection: whatever the receiver, it is how SQL is run);
- a call of ``.copy(...)`` with arguments (psycopg's ``Cursor.copy(statement)``; the
  argument-less ``dict.copy()``/``list.copy()`` are not SQL);
- a string literal (f-strings too, their ``{...}`` parts read as a name) that starts,
  after whitespace and SQL comments, with a statement: ``SELECT x``, ``INSERT INTO``,
  ``UPDATE t SET``, ``DELETE FROM``, ``WITH n AS (``, ``CREATE``/``ALTER``/``DROP`` of a
  table, index, database, function, ... The keywords must be in capitals, as every
  statement of this tree is written: prose ("Delete from the queue", "select an
  endpoint") is not SQL. Docstrings are never SQL.

A store is a module whose name ends with ``store`` (``store.py``, ``endpoint_store.py``),
or one of ``ALLOWED`` below, each with the reason it runs SQL of its own. Static SQL
belongs in the named-query files (``src/hookstream/io/sql/*.sql``, loaded by
``hookstream.io.queries``), which only stores run; a store builds the statements that
need an identifier.

Exit 1 listing ``file:line`` for each finding; exit 0 with a one-line summary.

Usage: ``scripts/check_sql.py [--root DIR]`` (default: this repository).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Modules that are stores under another name (paths from the repository's root).
ALLOWED: dict[str, str] = {
    # Applies the schema's .sql migration files and keeps their version table: the
    # migrations' own store. Its name is the one its many callers (services' start-up,
    # the CLI, tests, benchmarks) import.
    "src/hookstream/ops/migrate.py": "the migrations' store",
    # The connection boundary: plan_with_values sets a session parameter on every new
    # connection of a service (SET plan_cache_mode), no statement on the app's data.
    "src/hookstream/io/pg.py": "session settings of the connection boundary",
    # Administers the local PostgreSQL server of `hookstream stack` (creates the
    # database, probes that the server answers), not the app's schema.
    "src/hookstream/dev/localstack/postgres.py": "the local server's administration",
}

RUNS_SQL = frozenset({"execute", "executemany"})
_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)
_OBJECT = (r"(?:TABLE|INDEX|DATABASE|FUNCTION|PROCEDURE|VIEW|MATERIALIZED\s+VIEW|SCHEMA"
           r"|EXTENSION|TYPE|TRIGGER|SEQUENCE|ROLE|USER|PUBLICATION|SUBSCRIPTION|POLICY)\b")
_STATEMENT = re.compile("|".join([
    r"SELECT\s+\S",
    r"INSERT\s+INTO\s+\S",
    r"UPDATE\s+\S+\s+SET\s",
    r"DELETE\s+FROM\s+\S",
    r"WITH\s+(?:RECURSIVE\s+)?\w+(?:\s*\([^)]*\))?\s+AS\s*(?:NOT\s+)?(?:MATERIALIZED\s*)?\(",
    r"CREATE\s+(?:OR\s+REPLACE\s+|UNIQUE\s+|TEMP\s+|TEMPORARY\s+|UNLOGGED\s+)*" + _OBJECT,
    r"ALTER\s+(?:SYSTEM\b|" + _OBJECT + ")",
    r"DROP\s+" + _OBJECT,
]))


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    what: str

    def describe(self, root: Path) -> str:
        return f"{self.path.relative_to(root).as_posix()}:{self.line}: {self.what}"


def module_files(root: Path) -> list[Path]:
    """Every .py of src/hookstream and of each services/<name>."""
    folders = [root / "src" / "hookstream", *sorted((root / "services").glob("*/"))]
    return sorted(path for folder in folders if folder.is_dir()
                  for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def is_store(path: Path, root: Path) -> bool:
    return path.stem.endswith("store") or path.relative_to(root).as_posix() in ALLOWED


def looks_like_sql(text: str) -> bool:
    """``text`` starts, after whitespace and comments, with an SQL statement."""
    start = m.end() if (m := _COMMENTS.match(text)) else 0
    return _STATEMENT.match(text, start) is not None


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes (module, classes, functions)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def _text(node: ast.JoinedStr) -> str:
    """An f-string's text, each ``{...}`` read as a name."""
    return "".join(part.value if isinstance(part, ast.Constant) else "x"
                   for part in node.values)


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= 60 else flat[:59] + "…")


def findings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text("utf-8"), str(path))
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
            if looks_like_sql(text := _text(node)):
                yield node.lineno, f"SQL text outside a store: {_excerpt(text)}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in skip and looks_like_sql(node.value):
                yield node.lineno, f"SQL text outside a store: {_excerpt(node.value)}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name in RUNS_SQL or (name == "copy" and (node.args or node.keywords)):
                yield node.lineno, f".{name}() outside a store"


def check(root: Path) -> tuple[list[Path], list[Finding]]:
    files = module_files(root)
    found = [Finding(path, line, what) for path in files if not is_store(path, root)
             for line, what in sorted(findings(path))]
    return files, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository")
    root = parser.parse_args(argv).root.resolve()
    files, found = check(root)
    stores = [path for path in files if is_store(path, root)]
    allowed = [path for path in stores if path.relative_to(root).as_posix() in ALLOWED]
    if not found:
        print(f"SQL only in stores: {len(files)} modules of src/hookstream and services/*,"
              f" {len(stores)} of them stores ({len(allowed)} by the allowlist)")
        return 0
    for finding in found:
        print(finding.describe(root))
    modules = len({finding.path for finding in found})
    print(f"{len(found)} place(s) with SQL outside a store, in {modules} module(s): move the"
          " SQL into a named query (src/hookstream/io/sql) run by a *store module")
    return 1


if __name__ == "__main__":
    sys.exit(main())
