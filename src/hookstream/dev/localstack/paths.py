"""Where the local stack lives: the repository root, the stack folder, the logs.

- repository root: env ``HOOKSTREAM_REPO_ROOT``, else the first folder holding
  ``stack/pom.xml`` walking up from the working directory, else walking up from
  this file;
- stack folder (all state: Kafka log dirs, the PostgreSQL cluster, pid files):
  env ``HOOKSTREAM_STACK_DIR``, else ``<repo>/.stack`` (gitignored);
- logs: ``<stack>/logs``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT_ENV = "HOOKSTREAM_REPO_ROOT"
STACK_DIR_ENV = "HOOKSTREAM_STACK_DIR"
POM_RELATIVE = Path("stack") / "pom.xml"
PACKAGE_DIR = Path(__file__).resolve().parent


class StackError(RuntimeError):
    """The local stack cannot be brought up or down; the message says why and what to do."""


def _find_upwards(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / POM_RELATIVE).is_file():
            return folder
    return None


def repo_root() -> Path:
    """The hookstream repository root (the folder containing ``stack/pom.xml``)."""
    env = os.environ.get(REPO_ROOT_ENV)
    if env:
        root = Path(env).expanduser().resolve()
        if not (root / POM_RELATIVE).is_file():
            raise StackError(f"{REPO_ROOT_ENV}={env} does not contain {POM_RELATIVE}")
        return root
    with contextlib.suppress(OSError):  # the working directory may be gone
        found = _find_upwards(Path.cwd().resolve())
        if found is not None:
            return found
    found = _find_upwards(PACKAGE_DIR)
    if found is not None:
        return found
    raise StackError(
        f"cannot find the hookstream repository (a folder containing {POM_RELATIVE}) "
        f"above the working directory or {PACKAGE_DIR}; set {REPO_ROOT_ENV}"
    )


def stack_dir() -> Path:
    """The folder holding all local-stack state (created on demand by the starters)."""
    env = os.environ.get(STACK_DIR_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return repo_root() / ".stack"


def logs_dir() -> Path:
    return stack_dir() / "logs"


def package_file(name: str) -> Path:
    """A data file shipped in the ``hookstream.dev.localstack`` package folder."""
    path = PACKAGE_DIR / name
    if not path.is_file():
        raise StackError(f"package data file missing: {path}")
    return path


def ensure_dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=mode)
    return path


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file (for error messages)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    text = "\n".join(data.splitlines()[-lines:])
    return f"--- last lines of {path} ---\n{text}"


# One lock for every start/stop of the stack, so parallel `up`s (pytest-xdist workers,
# two shells) never launch two brokers or run initdb twice. flock locks belong to the
# open file description, so a second flock from this process would deadlock: the lock
# is reentrant within the process (and serialises its threads).
_lock_guard = threading.RLock()
_lock_depth = 0
_lock_fd: int | None = None


@contextlib.contextmanager
def stack_lock() -> Iterator[None]:
    global _lock_depth, _lock_fd
    with _lock_guard:
        if _lock_depth == 0:
            folder = ensure_dir(stack_dir())
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            _lock_fd = fd
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
            if _lock_depth == 0 and _lock_fd is not None:
                os.close(_lock_fd)  # releases the flock
                _lock_fd = None


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True if something already listens on host:port (binding with SO_REUSEADDR fails)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """True if a TCP connection to host:port is accepted."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tree_size(path: Path) -> int:
    """Bytes under ``path`` (0 if it does not exist); unreadable entries are skipped."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def remove_tree(path: Path) -> int:
    """Delete ``path`` and everything under it; returns the bytes freed."""
    if not path.exists():
        return 0
    size = tree_size(path)
    shutil.rmtree(path)
    return size
