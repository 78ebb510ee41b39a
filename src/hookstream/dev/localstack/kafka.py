"""Kafka (KRaft, broker + controller in each JVM) run from Maven jars: one node, or a
cluster of several on loopback (``hookstream stack up --brokers 3``).

Layout under the stack folder (node 1; node N>1 has the same under ``kafka/node-N/`` and
``logs/node-N/``)::

    kafka/server.properties   rendered from the package's server.properties template
    kafka/data/               log.dirs (topics, the KRaft metadata log, meta.properties)
    kafka/cluster.id          the id the storage was formatted with (shared by all nodes)
    kafka/kafka.pid           pid of the broker JVM we started
    logs/server.log           broker log (log4j2.yaml in this package)
    logs/kafka.out            the JVM's stdout/stderr (crashes, JVM errors)

Node N listens on the stack's ports plus ``NODE_PORT_STEP * (N - 1)``. The node count is
fixed when the storage is formatted (a static quorum of all nodes); changing it needs
``stack down --purge``.

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
# Node N's ports are node 1's plus this times N - 1 (19092/19093, 19192/19193, ...): far
# enough apart that the broker and controller series of a small cluster never meet.
NODE_PORT_STEP = 100
MAX_BROKERS = 9

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


def node_ports(ports: tuple[int, int], node: int) -> tuple[int, int]:
    """(port, controller port) of ``node`` (1-based) when node 1 has ``ports``."""
    step = NODE_PORT_STEP * (node - 1)
    return ports[0] + step, ports[1] + step


def broker_liveness_for(brokers: int) -> tuple[int, int]:
    """(broker.session.timeout.ms, broker.heartbeat.interval.ms): how soon a dead broker's
    partitions get a new leader. Kafka's 9 s / 2 s on one node (no other leader exists);
    3 s / 0.5 s on a cluster (see server.properties)."""
    return (3_000, 500) if brokers > 1 else (9_000, 2_000)


def replication_for(brokers: int) -> tuple[int, int]:
    """(replication factor, min ISR) for a cluster of ``brokers``: 1 / 1 on one node,
    3 / 2 from three up (one node may be lost without refusing acks=all writes); two
    nodes get 2 / 1, since 2 / 2 would stop writes whenever either is down."""
    if brokers >= 3:
        return 3, 2
    return brokers, 1


def quorum_line(ports: tuple[int, int], brokers: int) -> str:
    """The controller quorum line of server.properties."""
    if brokers == 1:
        return f"controller.quorum.bootstrap.servers={HOST}:{ports[1]}"
    voters = ",".join(f"{n}@{HOST}:{node_ports(ports, n)[1]}" for n in range(1, brokers + 1))
    return f"controller.quorum.voters={voters}"


def _properties_brokers(path: Path) -> int | None:
    """How many nodes a rendered server.properties belongs to (its static voters)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("controller.quorum.voters="):
            return len(line.split("=", 1)[1].split(","))
        if line.startswith("controller.quorum.bootstrap.servers="):
            return 1
    return None


def _formatted_brokers() -> int | None:
    """The node count the storage was formatted for, if it was formatted."""
    if not (data_dir() / "meta.properties").exists():
        return None
    return _properties_brokers(properties_path()) or 1


def wanted_brokers(requested: int | None = None) -> int:
    """The node count to start: the command line's, else the formatted storage's, else
    the record's, else 1."""
    if requested is not None:
        return requested
    recorded = record.read().get("kafka", {}).get("brokers")
    formatted = _formatted_brokers()
    if formatted is not None:
        return formatted
    return recorded if isinstance(recorded, int) and 1 <= recorded <= MAX_BROKERS else 1


def brokers() -> int:
    """Node count of this stack's Kafka (running: the one it was started with)."""
    if pid_path().exists():
        started = _properties_brokers(properties_path())
        if started is not None:
            return started
    return wanted_brokers()


def port() -> int:
    return _ports()[0]


def controller_port() -> int:
    return _ports()[1]


def bootstrap() -> str:
    """``bootstrap.servers`` for clients of the local broker(s): every node, so a client
    still finds the cluster when one is down."""
    ports = _ports()
    return ",".join(f"{HOST}:{node_ports(ports, n)[0]}" for n in range(1, brokers() + 1))


def kafka_dir() -> Path:
    return stack_dir() / "kafka"


def node_dir(node: int = 1) -> Path:
    # Node 1 keeps the single-node layout, so a stack from before clusters still runs.
    return kafka_dir() if node == 1 else kafka_dir() / f"node-{node}"


def node_logs(node: int = 1) -> Path:
    return logs_dir() if node == 1 else logs_dir() / f"node-{node}"


def data_dir(node: int = 1) -> Path:
    return node_dir(node) / "data"


def properties_path(node: int = 1) -> Path:
    return node_dir(node) / "server.properties"


def pid_path(node: int = 1) -> Path:
    return node_dir(node) / "kafka.pid"


def cluster_id_path() -> Path:
    return kafka_dir() / "cluster.id"


def server_log(node: int = 1) -> Path:
    return node_logs(node) / "server.log"


def stdout_log(node: int = 1) -> Path:
    return node_logs(node) / "kafka.out"


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


def write_properties(ports: tuple[int, int], node: int = 1, brokers: int = 1) -> Path:
    """Render ``server.properties`` of ``node`` of a ``brokers``-node cluster whose node 1
    has ``ports`` (broker, controller) into the stack folder."""
    template = Template(package_file("server.properties").read_text())
    log_dirs = str(data_dir(node)).replace("\\", "\\\\")
    own = node_ports(ports, node)
    replication, min_isr = replication_for(brokers)
    session_ms, heartbeat_ms = broker_liveness_for(brokers)
    text = template.substitute(
        node_id=node, quorum=quorum_line(ports, brokers), port=own[0], controller_port=own[1],
        log_dirs=log_dirs, replication=replication, min_isr=min_isr,
        broker_session_ms=session_ms, broker_heartbeat_ms=heartbeat_ms)
    path = properties_path(node)
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


def format_storage(properties: Path, node: int = 1, brokers: int = 1) -> str:
    """Format the node's log dir once (KRaft ``--standalone`` for one node, the static
    voters of the properties for several); returns the cluster id."""
    cid_file = cluster_id_path()
    meta = data_dir(node) / "meta.properties"
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
    quorum = ["--standalone"] if brokers == 1 else []
    run_tool(
        STORAGE_TOOL,
        ["format", *quorum, "-t", cluster_id, "-c", str(properties), "--ignore-formatted"],
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


def _is_our_broker(pid: int, node: int = 1) -> bool:
    """pid is a live JVM running kafka.Kafka with this stack's server.properties."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    args = [a.decode("utf-8", "replace") for a in argv]
    return BROKER_MAIN in args and str(properties_path(node)) in args and _pid_alive(pid)


def _find_orphan(node: int = 1) -> int | None:
    """Our broker running without a pid file (e.g. the pid file was deleted)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            pid = int(entry.name)
            if _is_our_broker(pid, node):
                return pid
    return None


def _running_pid(node: int = 1) -> int | None:
    path = pid_path(node)
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and _is_our_broker(pid, node):
        return pid
    if node > 1 and not path.parent.exists():
        return None  # never started: no /proc scan
    orphan = _find_orphan(node)
    if orphan is not None:
        ensure_dir(path.parent)
        path.write_text(f"{orphan}\n")
    return orphan


def running_pid(node: int = 1) -> int | None:
    """pid of the stack's broker (of ``node``) if it runs, else None."""
    return _running_pid(node)


def node_pids() -> dict[int, int | None]:
    """node → pid (None: not running), for every node of this stack's Kafka."""
    return {n: _running_pid(n) for n in range(1, brokers() + 1)}


def _failure(message: str, node: int = 1) -> StackError:
    return StackError(f"{message}\n{tail(server_log(node))}\n{tail(stdout_log(node), 20)}")


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


def _remember(ports: tuple[int, int], count: int = 1) -> None:
    record.remember("kafka", {
        "port": ports[0], "controller_port": ports[1], "brokers": count,
        "bootstrap": ",".join(f"{HOST}:{node_ports(ports, n)[0]}" for n in range(1, count + 1)),
        "properties": str(properties_path()), "data_dir": str(data_dir()),
        "log": str(server_log())})


def _spawn(node: int, libs: Path, java: str) -> int:
    """Start node ``node``'s JVM (its properties rendered, storage formatted); its pid."""
    logs = ensure_dir(node_logs(node))
    cmd = [
        java,
        *BROKER_JVM_FLAGS,
        f"-Dlog4j2.configurationFile={package_file('log4j2.yaml')}",
        f"-Dkafka.logs.dir={logs}",
        "-cp",
        f"{libs}/*",
        BROKER_MAIN,
        str(properties_path(node)),
    ]
    with stdout_log(node).open("ab") as out, open(os.devnull, "rb") as devnull:
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
    pid_path(node).write_text(f"{pid}\n")
    return pid


def launch(count: int | None = None) -> tuple[int, bool]:
    """Start the broker JVM(s) unless they run; returns (node 1's pid, started_now). Does
    not wait. ``count`` nodes (None: as formatted or recorded, else 1)."""
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
            running = brokers()
            if count is not None and count != running:
                raise StackError(
                    f"the local Kafka runs {running} broker(s), not {count}; stop it and "
                    "delete its data first (hookstream stack down --purge)")
            if ports is not None and record.recorded_port("kafka") is None:
                _remember(ports, running)  # started before stacks kept a record
            started = False
            for node in range(2, running + 1):  # a node killed (by a test) comes back
                if _running_pid(node) is None:
                    _spawn(node, ensure_jars(), java_bin())
                    started = True
            return pid, started
        wanted = wanted_ports()
        total = wanted_brokers(count)
        formatted = _formatted_brokers()
        if formatted is not None and formatted != total:
            raise StackError(
                f"the local Kafka's data is formatted for {formatted} broker(s), not {total}; "
                "delete it first (hookstream stack down --purge) or start it as it was")
        libs = ensure_jars()
        java = java_bin()
        pids = node_pids_for(total)
        for node in range(1, total + 1):
            if pids[node] is not None:
                continue
            pid_path(node).unlink(missing_ok=True)
            for p in node_ports(wanted, node):
                if port_in_use(p, HOST):
                    raise StackError(
                        f"port {HOST}:{p} is already in use by another process (not this "
                        f"stack's Kafka); free it or set {PORT_ENV} / {CONTROLLER_PORT_ENV}"
                    )
        ensure_dir(logs_dir())
        _remember(wanted, total)
        for node in range(1, total + 1):
            ensure_dir(data_dir(node))
            format_storage(write_properties(wanted, node, total), node, total)
        spawned = {n: pids[n] or _spawn(n, libs, java) for n in range(1, total + 1)}
        return spawned[1], True


def _pid_file(node: int) -> int | None:
    try:
        return int(pid_path(node).read_text().strip())
    except (OSError, ValueError):
        return None


def node_pids_for(count: int) -> dict[int, int | None]:
    return {n: _running_pid(n) for n in range(1, count + 1)}


def wait_ready(pid: int | None = None, timeout: float = READY_TIMEOUT) -> None:
    """Wait until every node runs and an admin metadata request sees them all registered."""
    pid = pid if pid is not None else _running_pid()
    if pid is None:
        raise _failure("the local Kafka is not running")
    count = brokers()
    deadline = time.monotonic() + timeout
    while True:
        # The pids just spawned, from their files: a JVM that has not exec'd yet does not
        # look like our broker in /proc, but it is alive.
        for node in range(1, count + 1):
            node_pid = pid if node == 1 else _pid_file(node)
            if node_pid is None or not _pid_alive(node_pid):
                pid_path(node).unlink(missing_ok=True)
                raise _failure(f"the local Kafka (node {node}) exited during startup", node)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _failure(f"the local Kafka (pid {pid}) was not ready after {timeout:.0f} s")
        if port_open(port(), HOST) and \
                (_admin_ready(min(5.0, max(remaining, 0.5))) or 0) >= count:
            return
        time.sleep(0.2)


def start(timeout: float = READY_TIMEOUT, count: int | None = None) -> dict[str, Any]:
    """Start the broker(s) (no-op if they run) and wait until they are ready."""
    begun = time.monotonic()
    with stack_lock():
        pid, started = launch(count)
        wait_ready(pid, timeout)
    info = status(check_health=False)
    info.update(healthy=True, started=started, seconds=round(time.monotonic() - begun, 2))
    return info


def stop(timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM our broker(s) (controlled shutdown), SIGKILL after ``timeout``; True if one
    ran. All nodes are signalled at once: a cluster stopped one by one loses its quorum
    half-way and the last nodes' controlled shutdown would wait for it."""
    with stack_lock():
        count = brokers()
        pids = {n: p for n, p in node_pids_for(count).items() if p is not None}
        if not pids:
            for node in range(1, count + 1):
                pid_path(node).unlink(missing_ok=True)
            return False
        for pid in pids.values():
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(_pid_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in pids.values():
            if _pid_alive(pid):
                print(f"localstack: Kafka (pid {pid}) ignored SIGTERM for {timeout:.0f} s; "
                      "SIGKILL")
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(_pid_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for node in range(1, count + 1):
            pid_path(node).unlink(missing_ok=True)
        return True


def purge() -> int:
    """Delete the broker's data, settings and cluster id (it must be stopped) and forget
    its ports; returns the bytes freed. The resolved jars are kept."""
    with stack_lock():
        if any(p is not None for p in node_pids().values()):
            raise StackError("the local Kafka is running; stop it first (hookstream stack down)")
        freed = remove_tree(kafka_dir())
        record.forget("kafka")
        return freed


def status(check_health: bool = True) -> dict[str, Any]:
    pid = _running_pid()
    count = brokers()
    info: dict[str, Any] = {
        "running": pid is not None,
        "pid": pid,
        "brokers": count,
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
    if count > 1:
        info["pids"] = {str(n): p for n, p in node_pids_for(count).items()}
    if pid is not None and check_health:
        info["healthy"] = port_open(port(), HOST) and (_admin_ready(5.0) or 0) >= count
    return info
