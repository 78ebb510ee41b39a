"""Small source trees on disk for the tests of the repository's checkers
(scripts/check_imports.py, scripts/check_sql.py), and running a checker over one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Each file (path relative to ``root``: its text, dedented), folders made."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def run_check(script: str, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / script), "--root", str(root)],
                          capture_output=True, text=True, timeout=60)
