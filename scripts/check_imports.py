#!/usr/bin/env python3
"""No import circles in the shipped code: every ``.py`` under the packages that
``pyproject.toml`` maps (``[tool.setuptools] package-dir``: ``src/hookstream`` and
``services/<name>`` as ``hookstream.<name>``) is parsed with ``ast``, its imports become
edges of a module graph, and every strongly connected component of more than one module
(Tarjan) is an import circle. Exit 1 listing each with one example path; exit 0 with a
one-line summary when there is none.

What counts as an edge, from module ``m``:

- every ``import`` and ``from ... import`` anywhere in ``m``: at module level and inside
  functions alike (a function-local import only hides a circle until the function runs);
- except those under ``if TYPE_CHECKING:`` (never executed; annotations only);
- ``import a.b.c`` and ``from a.b import c``: an edge to ``a.b.c`` when that is a module
  of the graph, else to the longest prefix that is (``from a.b import name`` is an edge
  to ``a.b``); relative imports are resolved against ``m``'s package first;
- imports of modules outside the graph (the standard library, third parties) are ignored.

- importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first: an edge to
  each of those packages too, unless ``m`` is inside it (a module importing a sibling
  finds its package already running; counting that would put every package whose
  ``__init__`` imports its own submodules in a circle with them).

A module that imports itself is not reported.

Usage: ``scripts/check_imports.py [--root DIR]`` (default: this repository).
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: Path
    line: int
    local: bool  # inside a function (run when it is called, not at import)
    via: str | None = None  # the module imported, when the target is its package

    def describe(self, root: Path) -> str:
        notes = [f"{self.path.relative_to(root)}:{self.line}"]
        if self.via is not None:
            notes.append(f"importing {self.via} runs it")
        if self.local:
            notes.append("in a function")
        return f"{self.source} -> {self.target}  ({', '.join(notes)})"


@dataclass
class Graph:
    modules: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, dict[str, Edge]] = field(default_factory=dict)  # first edge per pair

    @property
    def edge_count(self) -> int:
        return sum(len(targets) for targets in self.edges.values())


def package_dirs(root: Path) -> dict[str, Path]:
    """Package name -> directory, from pyproject's package-dir (python files only)."""
    config = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: root / folder for name, folder in mapping.items()
            if any((root / folder).rglob("*.py"))}


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> file. A file under two mapped folders belongs to the longer
    package name (``services/relay`` is ``hookstream.relay``, not under ``src``)."""
    owner: dict[Path, tuple[str, Path]] = {}
    for package, folder in package_dirs(root).items():
        for path in folder.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            current = owner.get(path)
            if current is None or len(package) > len(current[0]):
                owner[path] = (package, folder)
    modules: dict[str, Path] = {}
    for path, (package, folder) in owner.items():
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join([package, *parts])] = path
    return modules


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import node outside ``if TYPE_CHECKING:``, and whether it is in a function."""
    def walk(node: ast.AST, local: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, local
            elif isinstance(child, ast.If) and _type_checking(child.test):
                for other in child.orelse:  # the else branch does run
                    yield from walk(other, local)
            else:
                inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef
                                            | ast.Lambda)
                yield from walk(child, inner)

    yield from walk(tree, False)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its longest prefix that is a module of the graph."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
            modules: dict[str, Path]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if (found := _known(alias.name, modules)) is not None:
                yield found
        return
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    for alias in node.names:
        found = _known(f"{base}.{alias.name}", modules) if alias.name != "*" else None
        if found is None or found == _known(base, modules):
            found = _known(base, modules)  # a name defined in the module (or package)
        if found is not None:
            yield found


def ancestors(target: str, importer: str, modules: dict[str, Path]) -> list[str]:
    """The packages whose ``__init__`` importing ``target`` runs from ``importer``."""
    parts = target.split(".")
    found = []
    for n in range(1, len(parts)):
        package = ".".join(parts[:n])
        if package in modules and not importer.startswith(package + ".") \
                and importer != package:
            found.append(package)
    return found


def build_graph(root: Path) -> Graph:
    graph = Graph(modules=module_files(root))
    for module, path in sorted(graph.modules.items()):
        tree = ast.parse(path.read_text("utf-8"), str(path))
        out = graph.edges.setdefault(module, {})
        for node, local in imports(tree):
            for target in targets(node, module, path.name == "__init__.py", graph.modules):
                for reached in [*ancestors(target, module, graph.modules), target]:
                    if reached != module and reached not in out:
                        out[reached] = Edge(module, reached, path, node.lineno, local,
                                            None if reached == target else target)
    return graph


def components(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph.modules):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    members: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
    return sorted(found)


def example_cycle(graph: Graph, members: list[str]) -> list[Edge]:
    """A shortest path from the component's first module back to itself."""
    inside = set(members)
    start = members[0]
    came: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target, edge in sorted(graph.edges[node].items()):
            if target not in inside:
                continue
            if target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came[path[0].source])
                return path
            if target not in came:
                came[target] = edge
                queue.append(target)
    raise AssertionError("a strongly connected component always has a cycle")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (pyproject.toml)")
    root = parser.parse_args(argv).root.resolve()
    graph = build_graph(root)
    circles = components(graph)
    folders = ", ".join(sorted(str(p.relative_to(root)) for p in package_dirs(root).values()))
    if not circles:
        print(f"no import circle: {len(graph.modules)} modules, {graph.edge_count} imports"
              f" ({folders})")
        return 0
    for n, members in enumerate(circles, 1):
        print(f"import circle {n} of {len(circles)}: {len(members)} modules")
        for member in members:
            print(f"  {member}")
        print("  for example:")
        for edge in example_cycle(graph, members):
            print(f"    {edge.describe(root)}")
    print(f"{len(circles)} import circle(s) among {len(graph.modules)} modules ({folders})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
