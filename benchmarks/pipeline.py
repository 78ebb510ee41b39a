"""End to end: outbox rows at a target rate → relay → fanout → dispatcher → a receiver
farm on loopback, with slow (28 s), failing, throttling, hanging and gone endpoints
beside the healthy ones; optionally with chaos (SIGKILLed services, Kafka and
PostgreSQL restarted) and a reconciliation at the end. A benchmark, not a test.

    .venv/bin/python -m benchmarks.pipeline --rate 2000 --duration 60 [--chaos] [--no-bad]

Uses the stack the environment points at (HOOKSTREAM_DATABASE_URL and
HOOKSTREAM_KAFKA_BOOTSTRAP, else the local stack): a fresh database and topic prefix per
run. ``--chaos`` restarts Kafka and PostgreSQL through ``hookstream.dev.localstack`` and so
refuses to run unless the environment points at a private stack (HOOKSTREAM_STACK_DIR
other than the repository's .stack) whose addresses match HOOKSTREAM_DATABASE_URL and
HOOKSTREAM_KAFKA_BOOTSTRAP.

Prints a progress line every few seconds, then a table; writes
bench-results/pipeline-<label>.json and .png (latency and lag over time). Every run also
records how fast the host's cores were before and during its load
(``benchmarks.host_speed``): on this kind of machine that moves by 2× within seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import psycopg
from confluent_kafka.admin import AdminClient

from benchmarks import host_speed, latency_budget, pg_statements
from benchmarks.common import RESULTS, proc_stats
from hookstream.core.topics import Topics
from hookstream.dev import localstack
from hookstream.dev.harness import ServiceProcess, free_port, pipeline_env
from hookstream.endpoints import create_endpoint
from hookstream.io.kafka import delete_topics, ensure_topics
from hookstream.ops.migrate import migrate
from hookstream.ops.reconcile import Gap, attempt_counts, receiver_gaps, reconcile

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("relay", "fanout", "dispatcher")
PAD = "x" * 200
SLO_S = 10.0  # seed 002: 99 % of new deliveries start within 10 s
# Bad endpoints get a fixed trickle whatever --rate is (events/s, one endpoint each
# unless said otherwise): seed 000's 28-s customer gets its 12 events/s.
BAD_MIX = {
    "slow": {"rate": 12.0, "endpoints": 1, "delay_s": 28.0},
    "fail": {"rate": 5.0, "endpoints": 1},
    "throttle": {"rate": 5.0, "endpoints": 1, "retry_after_s": 2},
    "hang": {"rate": 2.0, "endpoints": 2},
    "gone": {"rate": 2.0, "endpoints": 1},
}
PROCESS_CPU_HZ = os.sysconf("SC_CLK_TCK")


# -- set-up ----------------------------------------------------------------------------

def stack_target() -> tuple[str, str]:
    env = localstack.env()
    return (os.environ.get("HOOKSTREAM_DATABASE_URL", env["HOOKSTREAM_DATABASE_URL"]),
            os.environ.get("HOOKSTREAM_KAFKA_BOOTSTRAP", env["HOOKSTREAM_KAFKA_BOOTSTRAP"]))


def check_private_stack(admin_url: str, bootstrap: str) -> str | None:
    """Why chaos must not run against this stack, or None. Restarting Kafka and
    PostgreSQL disturbs everyone using them, so only a private stack qualifies."""
    from hookstream.dev.localstack.paths import repo_root, stack_dir

    if stack_dir() == repo_root() / ".stack":
        return "HOOKSTREAM_STACK_DIR is not set: that is the shared stack"
    env = localstack.env()
    if (env["HOOKSTREAM_DATABASE_URL"], env["HOOKSTREAM_KAFKA_BOOTSTRAP"]) != (admin_url,
                                                                             bootstrap):
        return (f"the local stack in {stack_dir()} is {env}, but the environment points at "
                f"{admin_url} / {bootstrap}")
    st = localstack.status()
    if not (st["kafka"].get("healthy") and st["postgres"].get("healthy")):
        return (
            f"the private stack in {stack_dir()} is not up (python -m hookstream.dev.localstack up)"
        )
    return None


def fresh_database(admin_url: str, label: str) -> str:
    safe = re.sub(r"\W", "_", label)
    db = f"hs_pipe_{safe}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {db}")
    url = admin_url.rsplit("/", 1)[0] + "/" + db
    migrate(url)
    return url


def drop_database(admin_url: str, url: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")


@dataclass
class Mix:
    """Tenants and endpoints of the run: name → (tenant, kind, endpoint id)."""

    endpoints: dict[str, tuple[str, str, uuid.UUID]] = field(default_factory=dict)
    healthy_tenants: list[str] = field(default_factory=list)
    bad_tenants: dict[str, str] = field(default_factory=dict)  # kind → tenant

    def ids(self, kinds: set[str]) -> list[str]:
        return [str(i) for _, k, i in self.endpoints.values() if k in kinds]


def register_endpoints(db: str, ports: list[int], args: argparse.Namespace) -> tuple[Mix, dict]:
    mix = Mix()
    farm: dict[str, Any] = {"endpoints": {}}
    n = 0

    def add(conn: psycopg.Connection[Any], name: str, tenant: str, kind: str,
            types: list[str], **limits: Any) -> None:
        nonlocal n
        port = ports[n % len(ports)]
        n += 1
        ep = create_endpoint(conn, tenant=tenant, url=f"http://127.0.0.1:{port}/hooks/{name}",
                             event_types=types, allow_insecure=True, **limits)
        mix.endpoints[name] = (tenant, kind, ep.endpoint_id)
        cfg: dict[str, Any] = {"secret": ep.secret, "kind": kind}
        cfg.update({k: v for k, v in BAD_MIX.get(kind, {}).items()
                    if k in ("delay_s", "retry_after_s")})
        farm["endpoints"][name] = cfg

    with psycopg.connect(db) as conn:
        for t in range(args.tenants):
            tenant = f"h{t:02d}"
            mix.healthy_tenants.append(tenant)
            for e in range(args.endpoints_per_event):
                # '*' and a prefix wildcard: both match 'invoice.paid'
                add(conn, f"{tenant}-e{e}", tenant, "ok", ["*"] if e % 2 == 0 else ["invoice.*"],
                    rate_per_s=1000.0, burst=2000, max_in_flight=16)
        if not args.no_bad:
            for kind, spec in BAD_MIX.items():
                tenant = f"bad-{kind}"
                mix.bad_tenants[kind] = tenant
                for e in range(int(spec["endpoints"])):
                    add(conn, f"{tenant}-e{e}", tenant, kind, ["*"])
    return mix, farm


# -- processes ---------------------------------------------------------------------------

GO_FARM = ROOT / "benchmarks" / "receiver_farm_go"


def build_go_farm(work: Path) -> Path:
    """The Go farm's binary, built into ``work`` (Go's build cache makes a rebuild of
    unchanged sources take well under a second)."""
    binary = work / "receiver_farm_go"  # named so common.cpu_by_role sees a receiver
    # Never a toolchain download (the module asks for Go 1.19, any local Go builds it), and
    # a build cache even where no HOME is set.
    env = {**os.environ, "GOTOOLCHAIN": "local"}
    if not any(env.get(k) for k in ("GOCACHE", "XDG_CACHE_HOME", "HOME")):
        env["GOCACHE"] = str(work / "go-build-cache")
    try:
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=GO_FARM, env=env,
                       check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError("--receiver-server go needs Go on PATH (go build)") from None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"building the Go receiver farm failed:\n{exc.stderr}") from None
    return binary


def start_farm(config: dict[str, Any], ports: list[int], verify_every: int,
               work: Path, server: str = "go") -> list[subprocess.Popen[bytes]]:
    path = work / "farm.json"
    path.write_bytes(orjson.dumps(config))
    binary = build_go_farm(work) if server == "go" else None
    procs = []
    for port in ports:
        args = ["--port", str(port), "--config", str(path), "--verify-every", str(verify_every)]
        # The Go binary is the measured process itself (no wrapper): its CPU is the farm's.
        command = ([str(binary), *args] if binary is not None else
                   [sys.executable, "-m", "benchmarks.receiver_farm", *args, "--server", server])
        procs.append(subprocess.Popen(command, cwd=ROOT))
    deadline = time.monotonic() + 30
    for port, proc in zip(ports, procs, strict=True):
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=1).read()
                break
            except OSError:
                # A farm that refused its config has said why on stderr: no 30-s wait.
                if proc.poll() is not None:
                    for other in procs:
                        other.kill()
                    raise RuntimeError(f"the receiver farm on port {port} exited with "
                                       f"{proc.returncode} at start (its error is above)"
                                       ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError("receiver farm did not start") from None
                time.sleep(0.1)
    return procs


def farm_get(ports: list[int], path: str, timeout: float = 5.0) -> list[dict[str, Any]]:
    out = []
    for port in ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
                out.append(orjson.loads(r.read()))
        except OSError:
            out.append({})
    return out


class ProcTracker:
    """CPU seconds and peak RSS of a service across its incarnations (chaos restarts it):
    sampled every tick, so at most one tick of CPU is missed per SIGKILL."""

    def __init__(self) -> None:
        self.banked: dict[str, float] = {}
        self.last: dict[str, tuple[int, float]] = {}
        self.peak: Counter[str] = Counter()

    def sample(self, name: str, pid: int | None, tree: bool = False) -> None:
        """``tree``: count the children too (PostgreSQL's backends), no RSS."""
        if pid is None:
            return
        try:
            cpu, hwm = (tree_cpu(pid), 0) if tree else proc_stats(pid)
        except (OSError, IndexError, ValueError):
            return
        prev = self.last.get(name)
        if prev is not None and prev[0] != pid:
            self.banked[name] = self.banked.get(name, 0.0) + prev[1]
        self.last[name] = (pid, cpu)
        self.peak[name] = max(self.peak[name], hwm)

    def cpu(self, name: str) -> float:
        return self.banked.get(name, 0.0) + (self.last[name][1] if name in self.last else 0.0)


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its children, live and reaped (PostgreSQL backends)."""
    total = 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15]) / PROCESS_CPU_HZ  # utime stime cutime cstime
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = f.read().split()
    except OSError:
        return total
    for child in children:
        try:
            with open(f"/proc/{child}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / PROCESS_CPU_HZ
        except OSError:
            pass
    return total


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, all cores."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


# -- load ------------------------------------------------------------------------------

_INSERT = (
    "INSERT INTO outbox (event_id, tenant, type, object_id, object_version, payload)"
    " SELECT gen_random_uuid(), t, 'invoice.paid', 'obj-' || s, s, convert_to("
    "'{\"t\":' || extract(epoch FROM clock_timestamp()) || ',\"seq\":' || s"
    " || ',\"pad\":\"" + PAD + "\"}', 'UTF8')"
    " FROM unnest(%(tenants)s::text[], %(seqs)s::bigint[]) AS x(t, s)"
)


class Generator(threading.Thread):
    """Commits outbox rows at the target rate in small transactions (one multi-row
    INSERT every tick), the way a busy producer fleet would. Keeps going through a
    PostgreSQL restart: a failed batch is counted and the next tick reconnects."""

    def __init__(self, db: str, mix: Mix, rate: float, duration_s: float, tick_s: float = 0.05):
        super().__init__(name="generator", daemon=True)
        self.db, self.mix, self.rate = db, mix, rate
        self.duration_s, self.tick_s = duration_s, tick_s
        self.written = 0
        self.failed_batches = 0
        self.started_at = 0.0
        self.finished_at = 0.0
        self.rng = random.Random(7)

    def _batch(self, seq0: int, n_healthy: int,
               owed: dict[str, float]) -> tuple[list[str], list[int]]:
        tenants = [self.rng.choice(self.mix.healthy_tenants) for _ in range(n_healthy)]
        for kind, tenant in self.mix.bad_tenants.items():
            owed[kind] += BAD_MIX[kind]["rate"] * self.tick_s
            while owed[kind] >= 1:
                owed[kind] -= 1
                tenants.append(tenant)
        return tenants, list(range(seq0, seq0 + len(tenants)))

    def run(self) -> None:
        owed = dict.fromkeys(self.mix.bad_tenants, 0.0)
        conn: psycopg.Connection[Any] | None = None
        self.started_at = time.time()
        t0 = time.monotonic()
        healthy_owed = 0.0
        tick = 0
        while (elapsed := time.monotonic() - t0) < self.duration_s:
            healthy_owed += self.rate * self.tick_s
            n = int(healthy_owed)
            healthy_owed -= n
            tenants, seqs = self._batch(self.written, n, owed)
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.db, autocommit=True, connect_timeout=2)
                conn.execute(_INSERT, {"tenants": tenants, "seqs": seqs})
                self.written += len(tenants)
            except psycopg.Error:
                self.failed_batches += 1  # not committed: not an event; try again next tick
                if conn is not None:
                    conn.close()
                conn = None
            tick += 1
            # Catch up after a slow tick instead of drifting: the offered rate holds.
            time.sleep(max(0.0, t0 + tick * self.tick_s - time.monotonic()))
        del elapsed
        self.finished_at = time.time()
        if conn is not None:
            conn.close()


# -- the run ---------------------------------------------------------------------------

@dataclass
class Sample:
    t: float
    written: int
    published: int
    deliveries: int
    pending: int
    arrivals: int
    healthy_5s: float
    cpu: dict[str, float]


class Monitor(threading.Thread):
    """Every few seconds: backlog from SQL, arrivals from the farm, CPU and RSS from
    /proc; prints one progress line and keeps the series for the plot."""

    def __init__(self, db: str, gen: Generator, services: dict[str, ServiceProcess],
                 ports: list[int], interval_s: float, stop: threading.Event,
                 others: dict[str, int] | None = None):
        super().__init__(name="monitor", daemon=True)
        self.others = others or {}  # receivers, the load generator: name → pid
        self.db, self.gen, self.services, self.ports = db, gen, services, ports
        self.interval_s, self.stop = interval_s, stop
        self.samples: list[Sample] = []
        self.tracker = ProcTracker()
        self.t0 = time.time()
        self.events: list[tuple[float, str]] = []  # chaos markers

    def _sql(self) -> tuple[int, int, int] | None:
        try:
            with psycopg.connect(self.db, autocommit=True, connect_timeout=2) as conn:
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM outbox WHERE published_at IS NOT NULL),"
                    " (SELECT count(*) FROM deliveries),"
                    " (SELECT count(*) FROM deliveries WHERE status IN ('pending', 'in_flight'))"
                ).fetchone()
                return row  # type: ignore[return-value]
        except psycopg.Error:
            return None

    def sample_processes(self) -> None:
        for name, p in self.services.items():
            self.tracker.sample(name, p.proc.pid if p.running() and p.proc else None)
        for name, pid in self.others.items():
            self.tracker.sample(name, pid)
        # Kafka and PostgreSQL change pid when chaos restarts them: read the pid files.
        try:
            st = localstack.status()
        except Exception:
            return
        self.tracker.sample("kafka", st["kafka"].get("pid"), tree=True)
        self.tracker.sample("postgres", st["postgres"].get("pid"), tree=True)

    def run(self) -> None:
        self.sample_processes()
        while not self.stop.wait(self.interval_s):
            self.sample_processes()
            sql = self._sql()
            counts = farm_get(self.ports, "/count", timeout=2)
            arrivals = sum(c.get("requests", 0) for c in counts)
            healthy = sum(c.get("last_5s", {}).get("ok", 0) for c in counts) / 5
            prev = self.samples[-1] if self.samples else None
            s = Sample(
                t=time.time() - self.t0, written=self.gen.written,
                published=sql[0] if sql else (prev.published if prev else 0),
                deliveries=sql[1] if sql else (prev.deliveries if prev else 0),
                pending=sql[2] if sql else (prev.pending if prev else 0),
                arrivals=arrivals, healthy_5s=healthy,
                cpu={k: round(self.tracker.cpu(k), 1) for k in self.services})
            self.samples.append(s)
            down = [k for k, p in self.services.items() if not p.running()]
            print(f"t={s.t:5.0f}s written {s.written:>8,} published {s.published:>8,} "
                  f"deliveries {s.deliveries:>8,} pending {s.pending:>7,} "
                  f"healthy {healthy:>6,.0f}/s "
                  f"cpu {' '.join(f'{k[:4]}={v:.0f}' for k, v in s.cpu.items())}"
                  + (f" DOWN {','.join(down)}" if down else "")
                  + ("" if sql else " (db unreachable)"), flush=True)


class Chaos(threading.Thread):
    """SIGKILL each service at random moments and restart it; restart Kafka and
    PostgreSQL once each. Bounded: a fixed schedule drawn up front, within the load."""

    def __init__(self, services: dict[str, ServiceProcess], duration_s: float, seed: int,
                 monitor: Monitor, kills_per_service: int = 2, kafka_down_s: float = 3.0,
                 pg_down_s: float = 3.0, leader_of: Sequence[str] = ()):
        super().__init__(name="chaos", daemon=True)
        # On a cluster the Kafka fault is the partition leader's death (SIGKILL the broker
        # leading most partitions of these topics, bring it back later), not a stop of
        # the whole cluster: what a replicated deployment meets.
        self.leader_of = list(leader_of)
        rng = random.Random(seed)
        self.services, self.monitor = services, monitor
        plan: list[tuple[float, str]] = []
        for name in services:
            plan += [(rng.uniform(0.1, 0.9) * duration_s, f"kill:{name}")
                     for _ in range(kills_per_service)]
        plan.append((rng.uniform(0.25, 0.4) * duration_s, "restart:kafka"))
        plan.append((rng.uniform(0.6, 0.75) * duration_s, "restart:postgres"))
        self.plan = sorted(plan)
        self.rng = rng
        self.kafka_down_s, self.pg_down_s = kafka_down_s, pg_down_s
        self.log: list[dict[str, Any]] = []
        self.fault_ends: list[tuple[str, float]] = []  # (fault, epoch s when it ended)
        self.t0 = time.monotonic()

    def _mark(self, what: str, **info: Any) -> None:
        t = time.time() - self.monitor.t0
        self.monitor.events.append((t, what))
        self.log.append({"t": round(t, 1), "what": what, **info})
        print(f"chaos t={t:5.0f}s {what} {info or ''}", flush=True)

    def run(self) -> None:
        for at, action in self.plan:
            time.sleep(max(0.0, self.t0 + at - time.monotonic()))
            kind, name = action.split(":")
            if kind == "kill":
                p = self.services[name]
                if not p.running():
                    continue
                p.kill()
                self._mark(f"SIGKILL {name}")
                time.sleep(self.rng.uniform(0.5, 3.0))
                p.start()
                self._mark(f"restarted {name}")
                self.fault_ends.append((f"SIGKILL {name}", time.time()))
            elif name == "kafka" and self.leader_of:
                victim, pid, led = leading_broker(self.leader_of)
                os.kill(pid, signal.SIGKILL)
                self._mark(f"SIGKILL broker {victim}", leads=led)
                time.sleep(self.kafka_down_s)
                localstack.kafka_start()  # spawns the missing node; it rejoins by itself
                self._mark(f"broker {victim} restarting")
                self.fault_ends.append((f"broker {victim} down {self.kafka_down_s:g} s",
                                        time.time()))
            elif name == "kafka":
                t = time.monotonic()
                localstack.kafka_stop()
                self._mark("kafka stopped", stop_s=round(time.monotonic() - t, 1))
                time.sleep(self.kafka_down_s)
                t = time.monotonic()
                localstack.kafka_start()
                self._mark("kafka started", start_s=round(time.monotonic() - t, 1))
                self.fault_ends.append((f"kafka down {self.kafka_down_s:g} s", time.time()))
            else:
                localstack.pg_stop()
                self._mark("postgres stopped")
                time.sleep(self.pg_down_s)
                localstack.pg_start()
                self._mark("postgres started")
                self.fault_ends.append((f"postgres down {self.pg_down_s:g} s", time.time()))


def leading_broker(topics: Sequence[str]) -> tuple[int, int, int]:
    """(node id, pid, partitions led) of the local cluster's broker leading the most
    partitions of ``topics``."""
    bootstrap = localstack.env()["HOOKSTREAM_KAFKA_BOOTSTRAP"]
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    led = Counter(p.leader for name in topics for p in metadata[name].partitions.values())
    node, count = led.most_common(1)[0]
    pids = localstack.kafka.node_pids_for(localstack.kafka.brokers())
    pid = pids.get(node)
    if pid is None:
        raise RuntimeError(f"broker {node} leads partitions but is not running")
    return node, pid, count


def recovery_after_faults(db: str, healthy_endpoints: list[str],
                          fault_ends: list[tuple[str, float]]) -> list[dict[str, Any]]:
    """For each fault: seconds from its end until every healthy delivery of an event
    committed before that end was delivered (0 when none was still owed then)."""
    out = []
    with psycopg.connect(db) as conn:
        for fault, ended_at in fault_ends:
            (last,) = conn.execute(
                "SELECT extract(epoch FROM max(d.delivered_at))::float8 FROM deliveries d"
                " JOIN events e USING (event_id) WHERE d.endpoint_id = ANY(%s::uuid[])"
                " AND e.committed_at <= to_timestamp(%s)",
                (healthy_endpoints, ended_at)).fetchone()  # type: ignore[misc]
            pending = conn.execute(
                "SELECT count(*) FROM deliveries d JOIN events e USING (event_id)"
                " WHERE d.endpoint_id = ANY(%s::uuid[]) AND e.committed_at <= to_timestamp(%s)"
                " AND d.status <> 'delivered'", (healthy_endpoints, ended_at)).fetchone()[0]  # type: ignore[index]
            out.append({"fault": fault, "recovery_s": round(max(0.0, (last or ended_at)
                                                                    - ended_at), 1),
                        "still_undelivered": pending})
    return out


def percentiles(values: list[float], ps: tuple[float, ...] = (50, 95, 99)) -> dict[str, float]:
    if not values:
        return {f"p{p:g}": float("nan") for p in ps}
    s = sorted(values)
    return {f"p{p:g}": round(s[min(len(s) - 1, int(len(s) * p / 100))], 3) for p in ps}


def wait_drained(db: str, healthy_ids: list[str], expected_healthy: int, timeout_s: float,
                 chaos: bool) -> float:
    """Wait until every outbox row is published and every healthy delivery is final (and,
    after chaos, no lease is held by a dead worker). Returns the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            with psycopg.connect(db, autocommit=True, connect_timeout=2) as conn:
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM outbox WHERE published_at IS NULL"
                    "        AND quarantined_at IS NULL),"
                    " (SELECT count(*) FROM deliveries WHERE endpoint_id = ANY(%s::uuid[])"
                    "        AND status = 'delivered'),"
                    " (SELECT count(*) FROM deliveries WHERE status = 'in_flight'"
                    "        AND lease_expires_at < now())", (healthy_ids,)).fetchone()
            assert row is not None
            if row[0] == 0 and row[1] >= expected_healthy and (not chaos or row[2] == 0):
                return time.monotonic() - t0
        except psycopg.Error:
            pass
        time.sleep(1.0)
    return float("nan")


def measure(db: str, mix: Mix, load_t0: float, load_t1: float) -> dict[str, Any]:
    healthy = mix.ids({"ok"})
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM e.committed_at)::float8,"
            " extract(epoch FROM a.started_at - e.committed_at)::float8,"
            " extract(epoch FROM d.delivered_at - e.committed_at)::float8"
            " FROM deliveries d JOIN events e ON e.event_id = d.event_id"
            " LEFT JOIN attempts a ON a.delivery_id = d.delivery_id AND a.attempt_no = 1"
            " WHERE d.endpoint_id = ANY(%s::uuid[])", (healthy,)).fetchall()
        (now_s,) = conn.execute("SELECT extract(epoch FROM now())::float8").fetchone()  # type: ignore[misc]
        by_kind = conn.execute(
            "SELECT coalesce(k.kind, '?'), count(DISTINCT d.delivery_id), count(a.*),"
            " count(DISTINCT d.delivery_id) FILTER (WHERE d.status = 'delivered')"
            " FROM deliveries d LEFT JOIN attempts a ON a.delivery_id = d.delivery_id"
            " LEFT JOIN unnest(%s::uuid[], %s::text[]) AS k(id, kind) ON k.id = d.endpoint_id"
            " GROUP BY 1",
            ([i for _, _, i in mix.endpoints.values()],
             [k for _, k, _ in mix.endpoints.values()])).fetchall()
        # Where the commit→first attempt time goes, stage by stage (p50 / p99, seconds).
        stages = conn.execute(
            "SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY"
            "   extract(epoch FROM o.published_at - o.created_at)),"
            " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY"
            "   extract(epoch FROM e.stored_at - o.published_at)),"
            " percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY"
            "   extract(epoch FROM a.started_at - e.stored_at))"
            " FROM deliveries d JOIN events e ON e.event_id = d.event_id"
            " JOIN outbox o ON o.event_id = d.event_id"
            " JOIN attempts a ON a.delivery_id = d.delivery_id AND a.attempt_no = 1"
            " WHERE d.endpoint_id = ANY(%s::uuid[])", (healthy,)).fetchone()
        states: dict[str, int] = dict(conn.execute(
            "SELECT status, count(*) FROM deliveries GROUP BY status").fetchall())
        delivered_in_load = conn.execute(
            "SELECT count(*) FROM deliveries WHERE endpoint_id = ANY(%s::uuid[])"
            " AND delivered_at >= to_timestamp(%s) AND delivered_at < to_timestamp(%s)",
            (healthy, load_t0 + 5, load_t1)).fetchone()[0]  # type: ignore[index]
    first = [f if f is not None else now_s - c for c, f, _ in rows]
    delivered = [d if d is not None else now_s - c for c, _, d in rows]
    never = sum(1 for _, f, _ in rows if f is None)
    # per-second series of the healthy first-attempt latency, by commit time
    series: dict[int, list[float]] = {}
    for (c, _, _), f in zip(rows, first, strict=True):
        series.setdefault(int(c), []).append(f)
    slo_windows = []
    for start in range(int(load_t0), int(load_t1), 10):
        window = [v for sec in range(start, start + 10) for v in series.get(sec, [])]
        if window:
            slo_windows.append(sum(1 for v in window if v <= SLO_S) / len(window))
    attempts_total = sum(int(r[2]) for r in by_kind)
    deliveries_total = sum(int(r[1]) for r in by_kind)
    return {
        "healthy_deliveries": len(rows),
        "healthy_never_started": never,
        "first_attempt_s": percentiles(first),
        "delivered_s": percentiles(delivered),
        "healthy_delivered_per_s_during_load":
            round(delivered_in_load / max(1, load_t1 - load_t0 - 5)),
        "slo_fraction_within_10s":
            round(sum(1 for v in first if v <= SLO_S) / max(1, len(first)), 5),
        "slo_worst_10s_window": round(min(slo_windows), 5) if slo_windows else None,
        "by_kind": {r[0]: {"deliveries": int(r[1]), "attempts": int(r[2]),
                           "delivered": int(r[3])} for r in by_kind},
        "retry_amplification": round(attempts_total / max(1, deliveries_total), 3),
        "stages_p50_p99_s": {
            name: [round(float(x), 3) for x in v] if v else None
            for name, v in zip(("commit→published (relay)", "published→stored (fanout)",
                                "stored→first attempt (fanout tasks + dispatcher)"),
                               stages or (None, None, None), strict=True)},
        "states": states,
        "series": {str(k): [len(v), percentiles(v)["p50"], percentiles(v)["p99"]]
                   for k, v in sorted(series.items())},
    }


def harness_reconcile(db: str, mix: Mix, ports: list[int]) -> tuple[list[Gap], dict[str, Any]]:
    """What the receivers saw against attempt rows (the check the database cannot do)."""
    stats = farm_get(ports, "/stats", timeout=60)
    received: Counter[str] = Counter()
    for s in stats:
        received.update(s.get("by_id", {}))
    with psycopg.connect(db) as conn:
        delivered = [r[0] for r in conn.execute(
            "SELECT delivery_id::text FROM deliveries WHERE status = 'delivered'").fetchall()]
        attempts = attempt_counts(conn, set(received) | set(delivered))
    dupes = {k: n for k, n in received.items() if n > 1}
    info = {
        "requests": sum(received.values()), "distinct_webhook_ids": len(received),
        "duplicates": len(dupes), "duplicate_requests": sum(n - 1 for n in dupes.values()),
        "verified": sum(s.get("verified", 0) for s in stats),
        "verify_every": stats[0].get("verify_every") if stats else None,
        "bad_signature": sum(s.get("bad_signature", 0) for s in stats),
        "max_in_flight": {k: v for s in stats for k, v in s.get("max_in_flight", {}).items()},
        "series": _merge_series(stats),
    }
    return receiver_gaps(received, attempts, delivered), info


def _merge_series(stats: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, Counter[str]] = {}
    for s in stats:
        for sec, kinds in s.get("series", {}).items():
            out.setdefault(sec, Counter()).update(kinds)
    return {k: dict(v) for k, v in sorted(out.items())}


# -- yardsticks ------------------------------------------------------------------------

def yardstick_aiohttp(port: int, n: int) -> dict[str, float]:
    """The bare client on asyncio's loop and on uvloop: the dispatcher runs on uvloop,
    so quoting it against asyncio's slower loop alone would flatter it. The fastest
    counts (``best``)."""
    import uvloop

    from benchmarks.dispatcher import bare_client

    rates = {"asyncio": asyncio.run(bare_client(port, n, 256)),
             "uvloop": uvloop.run(bare_client(port, n, 256))}
    return {**{k: round(v) for k, v in rates.items()}, "best": round(max(rates.values()))}


def yardstick_kafka(bootstrap: str, n: int) -> dict[str, Any]:
    from hookstream.core.topics import TopicSpec
    from hookstream.dev.localstack import kafka

    topic = f"yardstick-{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, [TopicSpec(topic, 6, {})])
    try:
        res = kafka.run_tool("org.apache.kafka.tools.ProducerPerformance", [
            "--topic", topic, "--num-records", str(n), "--record-size", "300",
            "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
            "acks=all", "linger.ms=5", "enable.idempotence=true"], timeout=180)
    finally:
        delete_topics(bootstrap, [topic])
    last = [ln for ln in res.stdout.splitlines() if "records sent" in ln]
    m = re.search(r"([\d.]+) records/sec .*?([\d.]+) ms avg latency.*?([\d.]+) ms max",
                  last[-1]) if last else None
    return {"records_per_s": float(m.group(1)), "avg_latency_ms": float(m.group(2)),
            "line": last[-1]} if m else {"error": res.stdout[-500:] + res.stderr[-500:]}


def yardstick_postgres(db: str, n: int) -> dict[str, Any]:
    """Insert rate into a copy of the outbox table (same indexes and trigger-free): one
    bulk statement, and the load generator's way (multi-row INSERTs of 100, autocommit)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE yard_outbox (LIKE outbox INCLUDING ALL)")
        try:
            t = time.perf_counter()
            conn.execute(
                "INSERT INTO yard_outbox (event_id, tenant, type, payload)"
                " SELECT gen_random_uuid(), 'h' || (i %% 20), 'invoice.paid',"
                " convert_to(repeat('x', 250), 'UTF8') FROM generate_series(1, %s) i", (n,))
            bulk = n / (time.perf_counter() - t)
            sql = _INSERT.replace("INSERT INTO outbox", "INSERT INTO yard_outbox")
            t = time.perf_counter()
            for b in range(n // 100):
                conn.execute(sql, {"tenants": ["h01"] * 100,
                                   "seqs": list(range(b * 100, b * 100 + 100))})
            batched = n / (time.perf_counter() - t)
        finally:
            conn.execute("DROP TABLE yard_outbox")
    return {"bulk_rows_per_s": round(bulk), "batched_100_rows_per_s": round(batched)}


# -- report ----------------------------------------------------------------------------

def plot(path: Path, result: dict[str, Any], monitor: Monitor, t0: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = result["measure"]["series"]
    xs = [int(k) - t0 for k in series]
    fig, axes = plt.subplots(3, 1, figsize=(11, 10), sharex=True)
    ax = axes[0]
    arr = result["receivers"]["series"]
    ax.plot([int(k) - t0 for k in arr], [v.get("ok", 0) for v in arr.values()],
            label="healthy arrivals/s (receivers)")
    ax.plot(xs, [v[0] for v in series.values()], label="healthy deliveries committed/s",
            alpha=0.7)
    ax.set_ylabel("per second")
    ax.legend(loc="upper right")
    ax.set_title(result["label"])
    ax = axes[1]
    ax.plot(xs, [v[1] for v in series.values()], label="p50 commit→first attempt")
    ax.plot(xs, [v[2] for v in series.values()], label="p99 commit→first attempt")
    ax.axhline(SLO_S, color="red", linestyle=":", label="seed 002 SLO (10 s)")
    ax.axhline(1.0, color="grey", linestyle=":", label="target p99 1 s")
    ax.set_yscale("log")
    ax.set_ylabel("seconds (by commit time)")
    ax.legend(loc="upper right")
    ax = axes[2]
    mt = [s.t + monitor.t0 - t0 for s in monitor.samples]
    ax.plot(mt, [s.written - s.published for s in monitor.samples], label="outbox unpublished")
    ax.plot(mt, [s.pending for s in monitor.samples], label="deliveries pending/in flight")
    ax.set_ylabel("rows")
    ax.set_xlabel("seconds since load start")
    ax.legend(loc="upper right")
    for at, what in monitor.events:
        for a in axes:
            a.axvline(at + monitor.t0 - t0, color="purple", alpha=0.3)
        axes[2].annotate(what, (at + monitor.t0 - t0, 0), rotation=90, fontsize=7,
                         va="bottom", alpha=0.7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def drain_text(drain_s: float | None, never_started: int, timeout_s: float | None) -> str:
    """The drain line. A run that did not drain within the timeout is measured as it
    stands: a delivery not yet attempted counts with its wait so far, a lower bound."""
    if drain_s is not None and math.isfinite(drain_s):
        return f"{drain_s:.1f}"
    within = f" within {timeout_s:g} s" if timeout_s else ""
    return (f"not drained{within}: {never_started:,} healthy not yet attempted when "
            "measured (their latency below is the wait so far)")


def print_table(r: dict[str, Any]) -> None:
    m = r["measure"]
    rows = [
        ("offered events/s (outbox)", f"{r['offered_events_per_s']:,.0f}"),
        ("offered healthy deliveries/s", f"{r['offered_healthy_deliveries_per_s']:,.0f}"),
        ("healthy delivered/s during load", f"{m['healthy_delivered_per_s_during_load']:,}"),
        ("drain after load (s)", drain_text(r["drain_s"], m["healthy_never_started"],
                                            r["args"].get("drain_timeout"))),
        ("commit→first attempt p50/p95/p99 (s)",
         " / ".join(f"{v:.3f}" for v in m["first_attempt_s"].values())),
        ("commit→delivered p50/p95/p99 (s)",
         " / ".join(f"{v:.3f}" for v in m["delivered_s"].values())),
        ("first attempt within 10 s (all / worst 10-s window)",
         f"{m['slo_fraction_within_10s']:.4%} / {m['slo_worst_10s_window'] or 0:.4%}"),
        ("retry amplification (attempts ÷ deliveries)", f"{m['retry_amplification']:.3f}"),
    ]
    for stage, v in m.get("stages_p50_p99_s", {}).items():
        rows.append((f"  {stage} p50/p99 (s)", " / ".join(f"{x:.3f}" for x in v or [])))
    budget = r.get("latency_budget", {})
    for hop, v in budget.get("p50_p99_ms", {}).items():
        rows.append((f"  budget {hop} p50/p99 (ms)", " / ".join(f"{x:.1f}" for x in v)))
    for stage, v in budget.get("dispatcher_p50_p99_ms", {}).items():
        rows.append((f"  stage {stage} p50/p99 (ms)", " / ".join(f"{x:.1f}" for x in v)))
    if budget.get("floor_p50_ms"):
        rows.append(("  floor p50 (2 Kafka hops + 2 PG commits + 1 HTTP, ms) / ratio",
                     f"{budget['floor_p50_ms']:.1f} / {budget.get('p50_over_floor', '-')}×"))
    for stage, v in r.get("batching", {}).items():
        rows.append((f"  batching: {stage}", f"{v:,}"))
    for kind, v in sorted(m["by_kind"].items()):
        rows.append((f"  {kind}: deliveries / attempts / delivered",
                     f"{v['deliveries']:,} / {v['attempts']:,} / {v['delivered']:,}"))
    for name, v in r["processes"].items():
        rows.append((f"{name}: CPU s / ms per delivery / peak RSS MB",
                     f"{v['cpu_s']:.1f} / {v['cpu_ms_per_delivery']:.3f} / "
                     f"{v.get('peak_rss_mb', '-')}"))
    if "pg_statements" in r:
        rows.extend(pg_statements.table_rows(r["pg_statements"]))
    rows.append(("machine busy (both cores, %)", f"{r['machine_busy_pct']:.0f}"))
    speed = r.get("host_speed_ms_per_unit", {})
    during = speed.get("during_load", {})
    rows.append(("host speed: ms CPU per yardstick unit, before / load p10 p50 p90",
                 f"{speed.get('before', '-')} / {during.get('p10', '-')} "
                 f"{during.get('p50', '-')} {during.get('p90', '-')}"))
    loopback = r.get("host_loopback_ms_per_unit", {})
    if loopback:
        lo = loopback.get("during_load", {})
        rows.append(("host loopback: ms CPU per 1,000 TCP round trips, before / load p10 p50 "
                     "p90", f"{loopback.get('before', '-')} / {lo.get('p10', '-')} "
                     f"{lo.get('p50', '-')} {lo.get('p90', '-')}"))
    if "pipeline_cpu_per_delivery_in_host_units" in r:
        rows.append(("pipeline CPU per delivery in host units (÷ load p50)",
                     f"{r['pipeline_cpu_per_delivery_in_host_units']:.4f}"))
    rows.append(("load average before / after", f"{r['loadavg_before']} / {r['loadavg_after']}"))
    rc = r["receivers"]
    rows.append(("receivers: requests / duplicates / verified / bad sig",
                 f"{rc['requests']:,} / {rc['duplicates']:,} / {rc['verified']:,} / "
                 f"{rc['bad_signature']}"))
    for k, v in r.get("yardsticks", {}).items():
        rows.append((f"yardstick {k}", json.dumps(v) if isinstance(v, dict) else f"{v:,.0f}"))
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"{k:<{width}}  {v}" for k, v in rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=2000.0, help="healthy outbox events/s")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    ap.add_argument("--tenants", type=int, default=20, help="healthy tenants")
    ap.add_argument("--endpoints-per-event", type=int, default=2,
                    help="healthy endpoints per tenant (each event goes to all of them)")
    ap.add_argument("--no-bad", action="store_true", help="baseline: healthy endpoints only")
    ap.add_argument("--chaos", action="store_true", help="kill services, restart Kafka and PG")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kafka-down-s", type=float, default=3.0,
                    help="chaos: how long Kafka stays stopped (the bad day: 45)")
    ap.add_argument("--pg-down-s", type=float, default=3.0,
                    help="chaos: how long PostgreSQL stays stopped (the bad day: 20)")
    ap.add_argument("--kills-per-service", type=int, default=2,
                    help="chaos: SIGKILLs of each service process (each replica)")
    ap.add_argument("--replicas", type=int, default=1,
                    help="processes of each service (2: every partition has a second "
                         "member to take it over)")
    ap.add_argument("--receivers", type=int, default=2, help="receiver farm processes")
    ap.add_argument("--verify-every", type=int, default=1,
                    help="verify the signature of every Nth request (1 = all)")
    ap.add_argument("--receiver-server", choices=("go", "uvicorn", "aiohttp"),
                    default="go",
                    help="what serves the receiver farm: go (benchmarks/receiver_farm_go, "
                         "built with the machine's Go; about half of uvicorn's CPU per "
                         "request), uvicorn (the Python farm, the default until 2026-12-07), "
                         "or aiohttp (the farm until 2026-12-06 evening, ~40 %% more than "
                         "uvicorn)")
    ap.add_argument("--yardsticks", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--pg-statements", action="store_true",
                    help="report PostgreSQL's planning and execution time per statement"
                         " (needs pg_stat_statements loaded: benchmarks/pg_statements.py)")
    ap.add_argument("--profile", type=float, default=0.0,
                    help="py-spy each service for this many seconds mid-run")
    ap.add_argument("--drain-timeout", type=float, default=180.0)
    ap.add_argument("--label", default="")
    ap.add_argument("--keep-db", action="store_true")
    args = ap.parse_args()
    label = args.label or ("chaos" if args.chaos else "nobad" if args.no_bad else "mixed")
    admin, bootstrap = stack_target()
    if args.chaos and (why := check_private_stack(admin, bootstrap)):
        print(f"refusing --chaos: {why}", file=sys.stderr)
        return 2
    RESULTS.mkdir(exist_ok=True)
    work = RESULTS / f"pipeline-{label}"
    work.mkdir(exist_ok=True)
    loadavg_before = Path("/proc/loadavg").read_text().split()[:3]
    # This host's core speed wobbles by 2× (benchmarks/host_speed.py): timed back to back
    # before anything starts, and sampled through the load below.
    host_before_ms = host_speed.measure()
    loopback_before_ms = host_speed.measure_loopback()
    db = fresh_database(admin, label)
    topics = Topics(f"pipe-{label}-{uuid.uuid4().hex[:6]}")
    brokers = localstack.kafka.brokers()
    replication, min_isr = localstack.kafka.replication_for(brokers)
    ensure_topics(bootstrap, topics.specs(6, replication, min_isr))
    result: dict[str, Any] = {"label": label, "args": vars(args), "db": db,
                              "topic_prefix": topics.prefix,
                              "started": datetime.now(UTC).isoformat()}
    farm_procs: list[subprocess.Popen[bytes]] = []
    services: dict[str, ServiceProcess] = {}
    code = 0
    try:
        # ports first: the endpoint URLs name them; the farm reads its config at start
        ports = [free_port() for _ in range(args.receivers)]
        mix, farm_cfg = register_endpoints(db, ports, args)
        farm_procs = start_farm(farm_cfg, ports, args.verify_every, work, args.receiver_server)
        if args.yardsticks:
            # Only the latency floors before the load (benchmarks/latency_budget.py): they
            # are light. The throughput yardsticks run after it: 500,000 records of
            # ProducerPerformance just before the load left the broker busy for its first
            # ~20 s (healthy p99 265 ms over the run against 50 ms without them).
            print("yardsticks (latency floors) ...", flush=True)
            result["yardsticks"] = {
                "kafka_end_to_end": latency_budget.kafka_end_to_end(bootstrap),
                "postgres_commit": latency_budget.postgres_commit(db),
                "http_round_trip": latency_budget.http_round_trip(ports[0]),
            }
            print(json.dumps(result["yardsticks"]), flush=True)
        env = pipeline_env(database_url=db, bootstrap=bootstrap, topic_prefix=topics.prefix,
                           allow_private_targets="true",
                           log_level="INFO" if args.chaos else "WARNING",
                           # the 28-s endpoint must be able to answer: a deadline above 28 s
                           request_timeout_s="35", lease_s="60",
                           topic_replication_factor=str(replication),
                           topic_min_insync_replicas=str(min_isr))
        env["PYTHONFAULTHANDLER"] = "1"  # a crashing service leaves its stack in its log
        logs = work / "logs"
        # --replicas N: N processes of each service ("fanout", "fanout2", …), as a
        # scaled-out deployment runs them (chaos kills each replica on its own).
        services = {key: ServiceProcess(n, env, logs / f"{key}.log")
                    for n in SERVICES for i in range(args.replicas)
                    for key in [n if i == 0 else f"{n}{i + 1}"]}
        for p in services.values():
            p.start()
        for p in services.values():
            p.wait_healthy(90)
        gen = Generator(db, mix, args.rate, args.duration)
        stop = threading.Event()
        others = {f"receiver{i}": fp.pid for i, fp in enumerate(farm_procs)}
        others["loadgen+monitor"] = os.getpid()
        monitor = Monitor(db, gen, services, ports, 5.0, stop, others)
        monitor.sample_processes()
        infra0 = {k: monitor.tracker.cpu(k) for k in ("kafka", "postgres", *others)}
        batches0 = latency_budget.batch_counts(services)
        commits0 = latency_budget.database_commits(db)
        statements_off = pg_statements.available(db) if args.pg_statements else None
        if args.pg_statements and statements_off is None:
            pg_statements.reset(db)
        busy0 = machine_busy()
        speed = host_speed.Sampler()
        gen.start()
        monitor.start()
        speed.start()
        chaos = Chaos(services, args.duration, args.seed, monitor,
                      kills_per_service=args.kills_per_service, kafka_down_s=args.kafka_down_s,
                      pg_down_s=args.pg_down_s,
                      leader_of=[topics.events, topics.deliveries] if brokers > 1 else (),
                      ) if args.chaos else None
        if chaos:
            chaos.start()
        spies = []
        if args.profile:
            time.sleep(min(args.duration / 3, 20))
            for name, p in services.items():
                out = work / f"profile-{name}.txt"
                spies.append(subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
                     str(p.proc.pid), "--format", "raw", "--rate", "100", "--nonblocking",  # type: ignore[union-attr]
                     "--duration", str(int(args.profile)), "-o", str(out)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        gen.join()
        result["host_speed_ms_per_unit"] = {"before": host_before_ms,
                                            "during_load": speed.stop()}
        result["host_loopback_ms_per_unit"] = {"before": loopback_before_ms,
                                               "during_load": speed.loopback_spread()}
        if chaos:
            chaos.join(timeout=120)
        for spy in spies:
            spy.wait(60)
        load_t0, load_t1 = gen.started_at, gen.finished_at
        expected = 0
        with psycopg.connect(db) as conn:
            expected = conn.execute(
                "SELECT count(*) FROM outbox WHERE tenant = ANY(%s)",
                (mix.healthy_tenants,)).fetchone()[0] * args.endpoints_per_event  # type: ignore[index]
        print(f"load done: {gen.written:,} events written ({gen.failed_batches} failed batches);"
              " draining ...", flush=True)
        drain_s = wait_drained(db, mix.ids({"ok"}), expected, args.drain_timeout, args.chaos)
        monitor.sample_processes()
        busy1 = machine_busy()
        batches1 = latency_budget.batch_counts(services)
        commits1 = latency_budget.database_commits(db)
        if args.pg_statements:
            # Read before the measuring queries below add their own statements.
            result["pg_statements"] = ({"unavailable": statements_off} if statements_off
                                       else pg_statements.report(db))
        stop.set()
        monitor.join()
        m = measure(db, mix, load_t0, load_t1)
        arrivals: dict[str, float] = {}
        for farm_arrivals in farm_get(ports, "/arrivals", timeout=60):
            arrivals.update(farm_arrivals)
        budget = latency_budget.hops(db, mix.ids({"ok"}), arrivals)
        budget["dispatcher_p50_p99_ms"] = latency_budget.dispatcher_stages(
            services["dispatcher"])
        for name in ("relay", "fanout"):
            budget["dispatcher_p50_p99_ms"].update(latency_budget.dispatcher_stages(
                services[name], latency_budget.BATCH_STAGES))
        budget["floor_p50_ms"] = latency_budget.floor_ms(result.get("yardsticks", {}))
        arrival_p50 = budget["p50_p99_ms"]["commit→arrival"][0]
        if budget["floor_p50_ms"]:
            budget["p50_over_floor"] = round(arrival_p50 / budget["floor_p50_ms"], 1)
        result["latency_budget"] = budget
        delivered_all = sum(v["delivered"] for v in m["by_kind"].values()) or 1
        result["batching"] = latency_budget.batching(
            batches0, batches1, commits1 - commits0, delivered_all, gen.written)
        processes: dict[str, dict[str, Any]] = {}
        for name in (*services, "kafka", "postgres", *others):
            cpu = monitor.tracker.cpu(name) - infra0.get(name, 0.0)
            processes[name] = {"cpu_s": round(cpu, 1),
                               "cpu_ms_per_delivery": round(1000 * cpu / delivered_all, 3)}
            if name in services:
                processes[name]["peak_rss_mb"] = round(monitor.tracker.peak[name] / 2**20)
        gaps, receivers = harness_reconcile(db, mix, ports)
        speed_p50 = result["host_speed_ms_per_unit"]["during_load"].get("p50")
        if speed_p50:
            pipeline_ms = sum(v["cpu_ms_per_delivery"] for k, v in processes.items()
                              if k in services or k in ("kafka", "postgres"))
            result["pipeline_cpu_per_delivery_in_host_units"] = host_speed.in_units(
                pipeline_ms, speed_p50)
        result.update({
            "offered_events_per_s": args.rate + (0 if args.no_bad else
                                                 sum(v["rate"] for v in BAD_MIX.values())),
            "offered_healthy_deliveries_per_s": args.rate * args.endpoints_per_event,
            "events_written": gen.written, "failed_batches": gen.failed_batches,
            "load_seconds": round(load_t1 - load_t0, 1), "drain_s": drain_s,
            "measure": m, "processes": processes, "receivers": receivers,
            "machine_busy_pct":
                round(100 * (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]), 1),
            "loadavg_before": " ".join(loadavg_before),
            "loadavg_after": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
            "progress": [s.__dict__ for s in monitor.samples],
        })
        if chaos:
            result["chaos"] = chaos.log
            # No service may have needed a restart other than chaos's own after its kills.
            result["services_running_at_end"] = {n: p.running() for n, p in services.items()}
            result["recovery"] = recovery_after_faults(db, mix.ids({"ok"}), chaos.fault_ends)
            for r in result["recovery"]:
                print(f"recovery after {r['fault']}: {r['recovery_s']} s"
                      f" ({r['still_undelivered']} still undelivered)", flush=True)
            print(f"services running at the end: {result['services_running_at_end']}",
                  flush=True)
        # Reconciliation: the database's own accounting, then what the receivers saw.
        with psycopg.connect(db) as conn:
            since = datetime.fromtimestamp(load_t0, UTC) - timedelta(minutes=1)
            # reconcile's default bound (= the sweeper's): with this run's 35 s deadline a
            # slow endpoint's queued task legitimately waits about a minute.
            report = reconcile(conn, since=since, until=datetime.now(UTC), grace_s=0)
        all_gaps = report.gaps + gaps
        if args.yardsticks:
            print("yardsticks (throughput, after the load) ...", flush=True)
            result["yardsticks"].update({
                "bare aiohttp req/s (256 concurrent, signed)": yardstick_aiohttp(ports[0], 20000),
                "kafka ProducerPerformance (300 B, acks=all)": yardstick_kafka(bootstrap, 500_000),
                "postgres outbox inserts": yardstick_postgres(db, 100_000),
            })
        result["reconciliation"] = {**report.as_dict(), "receiver_gaps": [g.__dict__ for g in gaps],
                                    "ok": not all_gaps}
        print_table(result)
        print("\nreconciliation (database):")
        from hookstream.ops.reconcile import format_report

        print(format_report(report))
        print(f"reconciliation (receivers vs attempt rows): {receivers['duplicates']:,}"
              " webhook-ids seen more than once; "
              + ("all explained by attempt rows" if not gaps else
                 "; ".join(f"GAP {g.kind} {g.total} {g.sample[:3]}" for g in gaps)))
        plot(work.with_suffix(".png"), result, monitor, load_t0)
        code = 0 if not all_gaps else 1
        if all_gaps:
            print("UNEXPLAINED GAPS: exit 1", file=sys.stderr)
    finally:
        for p in services.values():
            p.terminate(30)
        for fp in farm_procs:
            fp.send_signal(signal.SIGTERM)
            try:
                fp.wait(10)
            except subprocess.TimeoutExpired:
                fp.kill()
        path = RESULTS / f"pipeline-{label}.json"
        path.write_text(json.dumps(result, indent=1, default=str))
        print(f"\nresults: {path} and {path.with_suffix('.png')}")
        try:
            delete_topics(bootstrap, [s.name for s in topics.specs()])
            if not args.keep_db:
                drop_database(admin, db)
        except Exception as exc:  # the stack may be down after a failed chaos run
            print(f"cleanup: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
