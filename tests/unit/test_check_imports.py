"""scripts/check_imports.py: import circles among the shipped modules are found (at module
level, in functions, through a package's ``__init__``), and a tree without one passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.source_trees import run_check, write_tree

PYPROJECT = """\
[tool.setuptools]
package-dir = { "pkg" = "src/pkg", "pkg.svc" = "services/svc" }
"""


def tree(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    return write_tree(root, {"src/pkg/__init__.py": "", "services/svc/__init__.py": "",
                             **files})


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return run_check("check_imports.py", root)


def test_a_tree_without_a_circle_passes(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "src/pkg/a.py": "from pkg import b\nimport os\n",
        "src/pkg/b.py": "from pkg.c import thing\n",
        "src/pkg/c.py": "thing = 1\n",
        "services/svc/main.py": "from pkg.a import b\nfrom . import helper\n",
        "services/svc/helper.py": "import json\n",
    })
    done = check(root)
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("no import circle: 7 modules")


def test_a_circle_is_reported_with_a_path(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "src/pkg/a.py": "from pkg.b import x\n",
        "src/pkg/b.py": "from pkg import c\nx = 1\n",
        "src/pkg/c.py": "import pkg.a\n",
        "src/pkg/d.py": "from pkg import a\n",  # reaches the circle, is not in it
    })
    done = check(root)
    assert done.returncode == 1
    assert "import circle 1 of 1: 3 modules" in done.stdout
    assert "pkg.d" not in done.stdout
    assert "pkg.a -> pkg.b  (src/pkg/a.py:1)" in done.stdout
    assert "pkg.c -> pkg.a  (src/pkg/c.py:1)" in done.stdout


def test_function_local_and_relative_imports_count_but_type_checking_does_not(
        tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "services/svc/app.py": """\
            def build():
                from .routes import ROUTES
                return ROUTES
            """,
        "services/svc/routes.py": """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from pkg.svc.app import build
            ROUTES = ()
            """,
    })
    assert check(root).returncode == 0
    (root / "services/svc/routes.py").write_text("from . import app\nROUTES = ()\n")
    done = check(root)
    assert done.returncode == 1
    assert "pkg.svc.app -> pkg.svc.routes  (services/svc/app.py:2, in a function)" in done.stdout


def test_importing_a_submodule_runs_its_package(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        # a facade: the package's __init__ imports its own modules (no circle) ...
        "src/pkg/cli/__init__.py": "def main():\n    from pkg.cli import run\n",
        "src/pkg/cli/run.py": "from pkg.cli import output\nfrom pkg import ops\n",
        "src/pkg/cli/output.py": "",
        "src/pkg/ops.py": "",
    })
    assert check(root).returncode == 0
    # ... but a module outside it that imports pkg.cli.output runs pkg/cli/__init__ first
    (root / "src/pkg/ops.py").write_text("from pkg.cli.output import x\n")
    done = check(root)
    assert done.returncode == 1
    assert ("pkg.ops -> pkg.cli  (src/pkg/ops.py:1, importing pkg.cli.output runs it)"
            in done.stdout)
