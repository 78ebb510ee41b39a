"""A private PostgreSQL cluster for the local stack, on 127.0.0.1 only.

Layout under the stack folder::

    pg/data/            the cluster (initdb -A trust -U hookstream, UTF8, locale C)
    pg/data/hookstream.conf   our settings, included from postgresql.conf
    pg/run/             the unix socket directory
    logs/postgres.log   the server log (pg_ctl -l)

PostgreSQL refuses to run as root: when we are root, initdb/pg_ctl run as the
``postgres`` OS user (``runuser -u postgres --``) and ``pg/`` is owned by it.
With ``HOOKSTREAM_EXTERNAL_DATABASE_URL`` set, no server is started at all.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from hookstream.dev.localstack import record
from hookstream.dev.localstack.paths import (
    StackError,
    ensure_dir,
    logs_dir,
    port_in_use,
    remove_tree,
    stack_dir,
    stack_lock,
    tail,
)

PORT_ENV = "HOOKSTREAM_STACK_PG_PORT"
BINDIR_ENV = "HOOKSTREAM_PG_BINDIR"
EXTERNAL_URL_ENV = "HOOKSTREAM_EXTERNAL_DATABASE_URL"
DEFAULT_PORT = 55432
HOST = "127.0.0.1"
USER = "hookstream"
DBNAME = "hookstream"
OS_USER_WHEN_ROOT = "postgres"
START_TIMEOUT = 60
STOP_TIMEOUT = 60

_INCLUDE_LINE = "include_if_exists = 'hookstream.conf'"


def wanted_port() -> int:
    """The port the server starts on (``record.wanted_port``)."""
    return record.wanted_port(PORT_ENV, "postgres", "port", DEFAULT_PORT)


def port() -> int:
    # While the cluster has a postmaster.pid, the server's port is the one it started
    # with (line 4 of that file), whatever the environment says now.
    pm = _postmaster_info()
    return pm[1] if pm is not None else wanted_port()


def external_url() -> str | None:
    return os.environ.get(EXTERNAL_URL_ENV) or None


def database_url() -> str:
    """The URL clients use: the external one if configured, else the local cluster's."""
    return external_url() or f"postgresql://{USER}@{HOST}:{port()}/{DBNAME}"


def pg_dir() -> Path:
    return stack_dir() / "pg"


def data_dir() -> Path:
    return pg_dir() / "data"


def socket_dir() -> Path:
    return pg_dir() / "run"


def log_path() -> Path:
    return logs_dir() / "postgres.log"


def bindir() -> Path:
    """The PostgreSQL server binaries (initdb, pg_ctl, postgres)."""
    env = os.environ.get(BINDIR_ENV)
    if env:
        path = Path(env)
        if not (path / "pg_ctl").is_file():
            raise StackError(f"{BINDIR_ENV}={env} has no pg_ctl")
        return path

    def version_key(p: str) -> tuple[int, ...]:
        found = re.search(r"/postgresql/([\d.]+)/bin", p)
        return tuple(int(x) for x in found.group(1).split(".") if x) if found else (0,)

    candidates = [
        p
        for p in glob.glob("/usr/lib/postgresql/*/bin")
        if os.path.isfile(os.path.join(p, "initdb")) and os.path.isfile(os.path.join(p, "pg_ctl"))
    ]
    if candidates:
        return Path(max(candidates, key=version_key))
    pg_config = shutil.which("pg_config")
    if pg_config:
        result = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=False
        )
        path = Path(result.stdout.strip())
        if result.returncode == 0 and (path / "initdb").is_file() and (path / "pg_ctl").is_file():
            return path
    raise StackError(
        "no PostgreSQL server binaries found (no /usr/lib/postgresql/*/bin/initdb, and "
        f"pg_config --bindir has none); run scripts/bootstrap.sh, which installs Debian's "
        f"postgresql package, or set {BINDIR_ENV}"
    )


# --------------------------------------------------------------------------- running as the owner


def _owner() -> pwd.struct_passwd | None:
    """The OS user the cluster runs as when we are root (None: run as ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(OS_USER_WHEN_ROOT)
    except KeyError:
        raise StackError(
            f"running as root, but there is no '{OS_USER_WHEN_ROOT}' OS user to run "
            "PostgreSQL as (it refuses root); run scripts/bootstrap.sh (Debian's postgresql "
            "package creates it) or run as a normal user"
        ) from None


def _chown(path: Path) -> None:
    owner = _owner()
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)


def _run(
    args: list[str], *, timeout: float | None = 120, new_session: bool = False
) -> subprocess.CompletedProcess[str]:
    cmd = list(args)
    if _owner() is not None:
        runuser = shutil.which("runuser")
        if not runuser:
            raise StackError("running as root but runuser (util-linux) is not installed")
        cmd = [runuser, "-u", OS_USER_WHEN_ROOT, "--", *cmd]
    # cwd: initdb/pg_ctl fail with "could not identify current directory" when the
    # postgres user cannot read the caller's working directory (e.g. /root).
    return subprocess.run(
        cmd,
        cwd=pg_dir(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        start_new_session=new_session,
    )


def _prepare_dirs() -> None:
    owner = _owner()
    ensure_dir(stack_dir())
    ensure_dir(logs_dir())
    ensure_dir(pg_dir(), 0o755)
    _chown(pg_dir())
    ensure_dir(socket_dir(), 0o755)
    _chown(socket_dir())
    log = log_path()
    if not log.exists():
        log.touch(0o644)
    _chown(log)
    if owner is not None:
        probe = _run(["test", "-w", str(pg_dir()), "-a", "-w", str(log)], timeout=30)
        if probe.returncode != 0:
            raise StackError(
                f"the '{OS_USER_WHEN_ROOT}' OS user cannot reach {pg_dir()} or {log} (a parent "
                f"folder is not world-searchable?); set HOOKSTREAM_STACK_DIR to a folder it can "
                "reach"
            )


def _write_owned(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o600)
    _chown(tmp)
    tmp.replace(path)


def initialized() -> bool:
    return (data_dir() / "PG_VERSION").is_file()


def _initdb(bin_dir: Path) -> None:
    data = data_dir()
    if data.exists() and any(data.iterdir()):
        raise StackError(f"{data} exists, is not empty and holds no cluster (no PG_VERSION)")
    result = _run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            USER,
            "--encoding=UTF8",
            "--locale=C",
        ],
        timeout=300,
    )
    if result.returncode != 0:
        raise StackError(
            f"initdb failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"
        )
    conf = data / "postgresql.conf"
    text = conf.read_text()
    if _INCLUDE_LINE not in text:
        _write_owned(conf, text.rstrip("\n") + f"\n\n# hookstream local stack\n{_INCLUDE_LINE}\n")


def _write_settings(port: int) -> None:
    sock = socket_dir()
    # sun_path holds 107 bytes: with a deep stack folder, go without the unix socket
    sockets = str(sock) if len(f"{sock}/.s.PGSQL.{port}") < 100 else ""
    _write_owned(
        data_dir() / "hookstream.conf",
        "# Written by hookstream.dev.localstack.postgres before every start; edits are lost.\n"
        "listen_addresses = '127.0.0.1'\n"
        f"port = {port}\n"
        f"unix_socket_directories = '{sockets}'\n"
        "max_connections = 200\n"
        "shared_buffers = 128MB\n",
    )


def _postmaster_info() -> tuple[int, int] | None:
    """(pid, port) from postmaster.pid, if there is one."""
    try:
        lines = (data_dir() / "postmaster.pid").read_text().splitlines()
        return int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None


def running(bin_dir: Path | None = None) -> bool:
    if not initialized():
        return False
    result = _run([str((bin_dir or bindir()) / "pg_ctl"), "status", "-D", str(data_dir())])
    return result.returncode == 0


def _connect(dbname: str, timeout: int = 10) -> Any:
    import psycopg

    return psycopg.connect(
        host=HOST, port=port(), user=USER, dbname=dbname, autocommit=True, connect_timeout=timeout
    )


def _ensure_database() -> None:
    import psycopg
    from psycopg import sql

    last: Exception | None = None
    for _ in range(50):
        try:
            with _connect("postgres") as conn:
                found = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (DBNAME,)
                ).fetchone()
                if not found:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
                return
        except psycopg.OperationalError as exc:  # e.g. "the database system is starting up"
            last = exc
            time.sleep(0.2)
    raise StackError(f"cannot connect to the local PostgreSQL: {last}\n{tail(log_path())}")


def _remember(port: int) -> None:
    record.remember("postgres", {
        "port": port, "url": f"postgresql://{USER}@{HOST}:{port}/{DBNAME}",
        "data_dir": str(data_dir()), "log": str(log_path())})


def start(timeout: int = START_TIMEOUT) -> dict[str, Any]:
    """Start the cluster (initdb on first use; no-op if it runs); ensure the database."""
    if external_url():
        return status()
    begun = time.monotonic()
    with stack_lock():
        bin_dir = bindir()
        _prepare_dirs()
        if not initialized():
            _initdb(bin_dir)
        started = False
        if running(bin_dir):
            pm = _postmaster_info()
            asked = record.requested_port(PORT_ENV)
            if pm is not None and asked is not None and pm[1] != asked:
                raise StackError(
                    f"the local PostgreSQL (pid {pm[0]}) already runs on port {pm[1]}, not "
                    f"{asked} ({PORT_ENV}); stop it first (hookstream stack down --only "
                    "postgres) or unset that variable"
                )
            if pm is not None and record.recorded_port("postgres") is None:
                _remember(pm[1])  # started before stacks kept a record
        else:
            wanted = wanted_port()
            if port_in_use(wanted, HOST):
                raise StackError(
                    f"port {HOST}:{wanted} is already in use by another process; free it or "
                    f"set {PORT_ENV}"
                )
            _write_settings(wanted)
            _remember(wanted)
            result = _run(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data_dir()),
                    "-l",
                    str(log_path()),
                    "-w",
                    "-t",
                    str(timeout),
                    "start",
                ],
                timeout=timeout + 30,
                new_session=True,
            )
            if result.returncode != 0:
                raise StackError(
                    f"pg_ctl start failed (exit {result.returncode}):\n"
                    f"{result.stdout}{result.stderr}\n{tail(log_path())}"
                )
            started = True
        _ensure_database()
    info = status(check_health=False)
    info.update(healthy=True, started=started, seconds=round(time.monotonic() - begun, 2))
    return info


def stop(timeout: int = STOP_TIMEOUT) -> bool:
    """``pg_ctl -m fast stop`` of our data dir; True if it was running."""
    if external_url():
        return False
    with stack_lock():
        if not initialized():
            return False
        bin_dir = bindir()
        if not running(bin_dir):
            return False
        result = _run(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data_dir()),
                "-m",
                "fast",
                "-w",
                "-t",
                str(timeout),
                "stop",
            ],
            timeout=timeout + 30,
        )
        if result.returncode != 0:
            raise StackError(
                f"pg_ctl stop failed (exit {result.returncode}):\n{result.stdout}{result.stderr}"
            )
        return True


def purge() -> int:
    """Delete the cluster (it must be stopped) and forget its port; returns the bytes
    freed. Nothing happens to an external database."""
    if external_url():
        return 0
    with stack_lock():
        if running():
            raise StackError("the local PostgreSQL is running; stop it first "
                             "(hookstream stack down)")
        freed = remove_tree(pg_dir())
        record.forget("postgres")
        return freed


def status(check_health: bool = True) -> dict[str, Any]:
    ext = external_url()
    if ext:
        return {"external": True, "url": ext, "running": None, "healthy": None}
    is_running = running()
    pm = _postmaster_info() if is_running else None
    info: dict[str, Any] = {
        "external": False,
        "running": is_running,
        "pid": pm[0] if pm else None,
        "url": database_url(),
        "data_dir": str(data_dir()),
        "log": str(log_path()),
        "healthy": False,
    }
    if pm is not None and (warning := record.environment_disagrees(PORT_ENV, pm[1])):
        info["warnings"] = [warning]
    if is_running and check_health:
        try:
            with _connect(DBNAME, timeout=5) as conn:
                conn.execute("SELECT 1").fetchone()
            info["healthy"] = True
        except Exception as exc:
            info["error"] = str(exc)
    return info
