"""A single-node Kafka (KRaft, broker + controller in one JVM) run from Maven jars.

Layout under the stack folder::

    kafka/server.properties   rendered from the package's server.properties template
    kafka/data/               log.dirs (topics, the KRaft metadata log, meta.properties)
    kafka/cluster.id          the id the storage was formatted with
    kafka/kafka.pid           pid of the broker JVM we started
    logs/server.log           broker log (log4j2.yaml in this package)
    logs/kafka.out            the JVM's stdout/stderr (crashes, JVM errors)

The jars come from ``stack/pom.xml`` (``mvn dependency:copy-dependencies`` into
``stack/.kafka-libs``); the broker is ``kafka.Kafka``, storage formatting is
``kafka.tools.StorageTool`` (both in the ``kafka_2.13`` jar).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from string import Template
from typing import Any

from hookstream.dev.localstack import record
from hookstream.dev.localstack.paths import (
    StackError,
    ensure_dir,
    logs_dir,
    package_file,
    port_in_use,
    port_open,
    remove_tree,
    repo_root,
    stack_dir,
    stack_lock,
    tail,
)

PORT_ENV = "HOOKSTREAM_STACK_KAFKA_PORT"
CONTROLLER_PORT_ENV = "HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT"
DEFAULT_PORT = 19092
DEFAULT_CONTROLLER_PORT = 19093
HOST = "127.0.0.1"

READY_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0

# Main classes (checked against kafka_2.13-4.1.1.jar / kafka-tools-4.1.1.jar).
BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
TOPIC_COMMAND = "org.apache.kafka.tools.TopicCommand"
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"
GET_OFFSET_SHELL = "org.apache.kafka.tools.GetOffsetShell"

BROKER_JVM_FLAGS = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    # listeners are 127.0.0.1 anyway; this keeps `ss -ltn` showing 127.0.0.1, not ::ffff:
    "-Djava.net.preferIPv4Stack=true",
)
TOOL_JVM_FLAGS = ("-Xmx512m", "-Djava.awt.headless=true")

MVN_COMMAND = ("mvn", "-B", "-q", "-f", "stack/pom.xml", "dependency:copy-dependencies")

_rdkafka_log = logging.getLogger("hookstream.dev.localstack.rdkafka")


# --------------------------------------------------------------------------- settings


def wanted_ports() -> tuple[int, int]:
    """(port, controller port) the broker starts on (``record.wanted_port``)."""
    return (record.wanted_port(PORT_ENV, "kafka", "port", DEFAULT_PORT),
            record.wanted_port(CONTROLLER_PORT_ENV, "kafka", "controller_port",
                               DEFAULT_CONTROLLER_PORT))


def _ports() -> tuple[int, int]:
    # While the stack believes its broker runs (a pid file), its ports are the ones the
    # broker was started with: those in the server.properties it was given.
    if pid_path().exists():
        started = _properties_ports(properties_path())
        if started is not None:
            return started
    return wanted_ports()


def port() -> int:
    return _ports()[0]


def controller_port() -> int:
    return _ports()[1]


def bootstrap() -> str:
    """``bootstrap.servers`` for clients of the local broker."""
    return f"{HOST}:{port()}"


def kafka_dir() -> Path:
    return stack_dir() / "kafka"


def data_dir() -> Path:
    return kafka_dir() / "data"


def properties_path() -> Path:
    return kafka_dir() / "server.properties"


def pid_path() -> Path:
    return kafka_dir() / "kafka.pid"


def cluster_id_path() -> Path:
    return kafka_dir() / "cluster.id"


def server_log() -> Path:
    return logs_dir() / "server.log"


def stdout_log() -> Path:
    return logs_dir() / "kafka.out"


def libs_dir() -> Path:
    return repo_root() / "stack" / ".kafka-libs"


def java_bin() -> str:
    """``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH (Kafka 4 needs Java 17+)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise StackError(
            "java not found (Kafka 4 needs Java 17+); run scripts/bootstrap.sh, which "
            "installs Debian's openjdk-17-jre-headless"
        )
    return found


# --------------------------------------------------------------------------- jars


def _pom_digest() -> str:
    return hashlib.sha256((repo_root() / "stack" / "pom.xml").read_bytes()).hexdigest()


def ensure_jars() -> Path:
    """Resolve the Kafka jars into ``stack/.kafka-libs`` unless they are there already.

    A stamp with the pom's hash is kept in the folder; when the pom changes (a version
    bump) the folder is emptied and resolved again, so two Kafka versions never mix on
    the classpath.
    """
    libs = libs_dir()
    stamp = libs / ".pom.sha256"
    digest = _pom_digest()
    jars = sorted(libs.glob("kafka_2.13-*.jar")) if libs.is_dir() else []
    if jars:
        if not stamp.exists():
            stamp.write_text(digest + "\n")  # resolved before stamps existed: trust it
            return libs
        if stamp.read_text().strip() == digest:
            return libs
        if _running_pid() is not None:
            raise StackError(
                f"stack/pom.xml changed since {libs} was resolved, but the local Kafka is "
                "still running from those jars; run `python -m hookstream.dev.localstack down "
                "--only kafka` first"
            )
        print(f"localstack: stack/pom.xml changed, resolving the Kafka jars again into {libs}")
        shutil.rmtree(libs)
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError(
            f"the Kafka jars are not resolved ({libs} has no kafka_2.13-*.jar) and mvn is not "
            "installed; run scripts/bootstrap.sh, which installs Debian's maven"
        )
    java_bin()  # mvn needs a JDK/JRE too; fail with the clear message
    print(f"localstack: resolving the Kafka jars with: {' '.join(MVN_COMMAND)}")
    result = subprocess.run(
        [mvn, *MVN_COMMAND[1:]],
        cwd=repo_root(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise StackError(
            f"{' '.join(MVN_COMMAND)} failed (exit {result.returncode}):\n"
            f"{(result.stdout + result.stderr)[-4000:]}"
        )
    if not list(libs.glob("kafka_2.13-*.jar")):
        raise StackError(f"{' '.join(MVN_COMMAND)} ran but {libs} has no kafka_2.13-*.jar")
    stamp.write_text(digest + "\n")
    return libs


# --------------------------------------------------------------------------- tools


def run_tool(
    main_class: str,
    args: list[str],
    *,
    timeout: float | None = 300,
    check: bool = False,
    jvm_flags: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka command-line tool class from the stack's jars; output is captured.

    E.g. ``run_tool(CONSUMER_GROUP_COMMAND, ["--bootstrap-server", bootstrap(),
    "--describe", "--group", "g"])``. Logging goes to stderr at WARN
    (``tools-log4j2.yaml``), so stdout carries only the tool's own output.
    """
    libs = ensure_jars()
    cmd = [
        java_bin(),
        *(jvm_flags if jvm_flags is not None else TOOL_JVM_FLAGS),
        f"-Dlog4j2.configurationFile={package_file('tools-log4j2.yaml')}",
        "-cp",
        f"{libs}/*",
        main_class,
        *args,
    ]
    result = subprocess.run(
        cmd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise StackError(
            f"{main_class} {' '.join(args)} failed (exit {result.returncode}):\n"
            f"{result.stdout[-2000:]}{result.stderr[-4000:]}"
        )
    return result


# --------------------------------------------------------------------------- config + storage


def write_properties(ports: tuple[int, int]) -> Path:
    """Render ``server.properties`` for ``ports`` (broker, controller) into the stack folder."""
    template = Template(package_file("server.properties").read_text())
    log_dirs = str(data_dir()).replace("\\", "\\\\")
    text = template.substitute(port=ports[0], controller_port=ports[1], log_dirs=log_dirs)
    path = properties_path()
    ensure_dir(path.parent)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def _properties_ports(path: Path) -> tuple[int, int] | None:
    """(port, controller port) of a rendered server.properties, from its listeners line."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("listeners="):
            found: dict[str, int] = {}
            for item in line.split("=", 1)[1].split(","):
                name, _, rest = item.partition("://")
                found[name.strip()] = int(rest.rsplit(":", 1)[1])
            if "PLAINTEXT" in found and "CONTROLLER" in found:
                return found["PLAINTEXT"], found["CONTROLLER"]
    return None


def format_storage(properties: Path) -> str:
    """Format the log dir once (KRaft ``--standalone``); returns the cluster id."""
    cid_file = cluster_id_path()
    meta = data_dir() / "meta.properties"
    if meta.exists():
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    if cid_file.exists():
        cluster_id = cid_file.read_text().strip()
    else:
        out = run_tool(STORAGE_TOOL, ["random-uuid"], timeout=120, check=True)
        cluster_id = out.stdout.strip().splitlines()[-1].strip()
        cid_file.write_text(cluster_id + "\n")
    run_tool(
        STORAGE_TOOL,
        ["format", "--standalone", "-t", cluster_id, "-c", str(properties), "--ignore-formatted"],
        timeout=120,
        check=True,
    )
    return cluster_id


# --------------------------------------------------------------------------- process


def _pid_alive(pid: int) -> bool:
    """True if pid runs (reaps it if it is our exited child; zombies count as dead)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def _is_our_broker(pid: int) -> bool:
    """pid is a live JVM running kafka.Kafka with this stack's server.properties."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    args = [a.decode("utf-8", "replace") for a in argv]
    return BROKER_MAIN in args and str(properties_path()) in args and _pid_alive(pid)


def _find_orphan() -> int | None:
    """Our broker running without a pid file (e.g. the pid file was deleted)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            pid = int(entry.name)
            if _is_our_broker(pid):
                return pid
    return None


def _running_pid() -> int | None:
    path = pid_path()
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and _is_our_broker(pid):
        return pid
    orphan = _find_orphan()
    if orphan is not None:
        ensure_dir(path.parent)
        path.write_text(f"{orphan}\n")
    return orphan


def running_pid() -> int | None:
    """pid of the stack's broker if it runs, else None."""
    return _running_pid()


def _failure(message: str) -> StackError:
    return StackError(f"{message}\n{tail(server_log())}\n{tail(stdout_log(), 20)}")


def _admin_ready(timeout: float) -> int | None:
    """Broker count from an admin metadata request, or None if it did not answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config: dict[str, Any] = {"bootstrap.servers": bootstrap(), "logger": _rdkafka_log}
    admin = AdminClient(config)
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException:
        return None
    return len(metadata.brokers)


def _remember(ports: tuple[int, int]) -> None:
    record.remember("kafka", {
        "port": ports[0], "controller_port": ports[1], "bootstrap": f"{HOST}:{ports[0]}",
        "properties": str(properties_path()), "data_dir": str(data_dir()),
        "log": str(server_log())})


def launch() -> tuple[int, bool]:
    """Start the broker JVM unless it runs; returns (pid, started_now). Does not wait."""
    with stack_lock():
        pid = _running_pid()
        if pid is not None:
            ports = _properties_ports(properties_path())
            asked = (record.requested_port(PORT_ENV), record.requested_port(CONTROLLER_PORT_ENV))
            if ports is not None and any(a is not None and a != p
                                         for a, p in zip(asked, ports, strict=True)):
                raise StackError(
                    f"the local Kafka (pid {pid}) already runs on ports {ports[0]}/{ports[1]}, "
                    f"not {asked[0] or ports[0]}/{asked[1] or ports[1]} ({PORT_ENV} / "
                    f"{CONTROLLER_PORT_ENV}); stop it first (hookstream stack down --only "
                    "kafka) or unset those variables"
                )
            if ports is not None and record.recorded_port("kafka") is None:
                _remember(ports)  # started before stacks kept a record
            return pid, False
        wanted = wanted_ports()
        pid_path().unlink(missing_ok=True)
        libs = ensure_jars()
        java = java_bin()
        for p in wanted:
            if port_in_use(p, HOST):
                raise StackError(
                    f"port {HOST}:{p} is already in use by another process (not this stack's "
                    f"Kafka); free it or set {PORT_ENV} / {CONTROLLER_PORT_ENV}"
                )
        ensure_dir(data_dir())
        logs = ensure_dir(logs_dir())
        properties = write_properties(wanted)
        _remember(wanted)
        format_storage(properties)
        cmd = [
            java,
            *BROKER_JVM_FLAGS,
            f"-Dlog4j2.configurationFile={package_file('log4j2.yaml')}",
            f"-Dkafka.logs.dir={logs}",
            "-cp",
            f"{libs}/*",
            BROKER_MAIN,
            str(properties),
        ]
        with stdout_log().open("ab") as out, open(os.devnull, "rb") as devnull:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            out.write(f"--- {stamp} localstack starting: {' '.join(cmd)}\n".encode())
            out.flush()
            # posix_spawn, not subprocess.Popen: no Popen object that would warn
            # "subprocess ... is still running" when collected; new session so a ^C
            # in the terminal that ran `up` does not reach the broker.
            pid = os.posix_spawn(
                java,
                cmd,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, devnull.fileno(), 0),
                    (os.POSIX_SPAWN_DUP2, out.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, out.fileno(), 2),
                ],
                setsid=True,
            )
        pid_path().write_text(f"{pid}\n")
        return pid, True


def wait_ready(pid: int | None = None, timeout: float = READY_TIMEOUT) -> None:
    """Wait until the broker answers an admin metadata request with itself registered."""
    pid = pid if pid is not None else _running_pid()
    if pid is None:
        raise _failure("the local Kafka is not running")
    deadline = time.monotonic() + timeout
    while True:
        if not _pid_alive(pid):
            pid_path().unlink(missing_ok=True)
            raise _failure(f"the local Kafka (pid {pid}) exited during startup")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _failure(f"the local Kafka (pid {pid}) was not ready after {timeout:.0f} s")
        if port_open(port(), HOST) and (_admin_ready(min(5.0, max(remaining, 0.5))) or 0) >= 1:
            return
        time.sleep(0.2)


def start(timeout: float = READY_TIMEOUT) -> dict[str, Any]:
    """Start the broker (no-op if it runs) and wait until it is ready."""
    begun = time.monotonic()
    with stack_lock():
        pid, started = launch()
        wait_ready(pid, timeout)
    info = status(check_health=False)
    info.update(healthy=True, started=started, seconds=round(time.monotonic() - begun, 2))
    return info


def stop(timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM our broker (controlled shutdown), SIGKILL after ``timeout``; True if it ran."""
    with stack_lock():
        pid = _running_pid()
        if pid is None:
            pid_path().unlink(missing_ok=True)
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _pid_alive(pid):
            print(f"localstack: Kafka (pid {pid}) ignored SIGTERM for {timeout:.0f} s; SIGKILL")
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
        pid_path().unlink(missing_ok=True)
        return True


def purge() -> int:
    """Delete the broker's data, settings and cluster id (it must be stopped) and forget
    its ports; returns the bytes freed. The resolved jars are kept."""
    with stack_lock():
        if _running_pid() is not None:
            raise StackError("the local Kafka is running; stop it first (hookstream stack down)")
        freed = remove_tree(kafka_dir())
        record.forget("kafka")
        return freed


def status(check_health: bool = True) -> dict[str, Any]:
    pid = _running_pid()
    info: dict[str, Any] = {
        "running": pid is not None,
        "pid": pid,
        "bootstrap": bootstrap(),
        "controller": f"{HOST}:{controller_port()}",
        "properties": str(properties_path()),
        "data_dir": str(data_dir()),
        "log": str(server_log()),
        "healthy": False,
    }
    if cluster_id_path().exists():
        info["cluster_id"] = cluster_id_path().read_text().strip()
    if pid is not None:
        warnings = [w for w in (record.environment_disagrees(PORT_ENV, port()),
                                record.environment_disagrees(CONTROLLER_PORT_ENV,
                                                             controller_port())) if w]
        if warnings:
            info["warnings"] = warnings
    if pid is not None and check_health:
        info["healthy"] = port_open(port(), HOST) and (_admin_ready(5.0) or 0) >= 1
    return info
