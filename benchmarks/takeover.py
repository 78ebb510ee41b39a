"""Takeover (issue #16): how long a SIGKILLed (or restarted) group member's partitions go
unserved, on the real broker of the local stack.

A 6-partition topic gets a steady ~200 records/s (round-robin over the partitions, the
value is the send time); two member processes of one group consume it and log every
record, assignment and error to a JSON-lines file each. Scenarios:

* ``kill``: SIGKILL one member; for each of its partitions, the seconds from the kill
  until the survivor consumes from it (and the survivor's own partitions' longest gap).
* ``restart``: SIGKILL one member and start a new one at once (same name, so the same
  ``group.instance.id`` for the static variants); seconds until any member consumes
  each of the killed one's partitions again.
* ``broker-restart``: stop and start the local Kafka while both members run
  (``coordinator-restart``: only the node coordinating the group, ``--brokers 3``); seconds
  from the broker being ready until each partition is consumed again, and the errors
  (fatal ones included) the members saw.

Variants: ``classic`` (the services' consumer_config today), ``static`` (classic +
group.instance.id), ``kip848`` (group.protocol=consumer; session timeout and heartbeat
set on the GROUP resource with incrementalAlterConfigs), ``kip848-static``.

    python -m benchmarks.takeover --variant classic --runs 3
    python -m benchmarks.takeover --variant kip848 --session-ms 6000 --heartbeat-ms 1500
    python -m benchmarks.takeover --variant static --scenarios restart
    python -m benchmarks.takeover --variant static --scenarios broker-restart

Results (JSON) land in bench-results/takeover-<variant>-<time>.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
)

from hookstream.core.group import Membership
from hookstream.core.topics import TopicSpec
from hookstream.dev import localstack
from hookstream.io.kafka import (
    consumer_config,
    delete_topics,
    ensure_topics,
    group_timeouts,
    set_group_timeouts,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench-results"
VARIANTS = ("classic", "static", "kip848", "kip848-static")


# --------------------------------------------------------------------------- member


def member_config(variant: str, bootstrap: str, group: str, name: str,
                  classic_session_ms: int | None = None) -> dict[str, Any]:
    if variant.startswith("kip848"):
        # The timeouts are the group's (set_group_timeouts), not the member's.
        membership = Membership("consumer")
    else:  # the broker must allow a classic session below 6 s (group.min.session...)
        session_ms = classic_session_ms or 6_000
        membership = Membership("classic", session_ms, max(session_ms // 4, 100))
    config = consumer_config(
        bootstrap, group, name, membership,
        # The benchmark measures the group, not the services' commit path: offsets are
        # committed by librdkafka twice a second.
        **{"enable.auto.commit": True, "enable.auto.offset.store": True,
           "auto.commit.interval.ms": 500})
    if variant.endswith("static"):
        config["group.instance.id"] = f"{group}-{name}"
    return config


def is_fatal(err: KafkaError) -> bool:
    # A consumer's fatal error reaches poll as a message error _FATAL whose fatal() is
    # False (the underlying error is in the text; rd_kafka_fatal_error has it).
    return err.fatal() or err.code() == KafkaError._FATAL


def run_member(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out = open(args.out, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    lock = threading.Lock()

    def emit(**event: Any) -> None:
        event.setdefault("t", time.time())
        with lock:
            out.write(json.dumps(event, separators=(",", ":")) + "\n")

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def on_error(err: KafkaError) -> None:
        emit(ev="error", code=err.name(), fatal=is_fatal(err), text=err.str())

    def make() -> Consumer:
        config = member_config(args.variant, args.bootstrap, args.group, args.name,
                               args.classic_session_ms)
        config["error_cb"] = on_error
        consumer = Consumer(config)
        consumer.subscribe(
            [args.topic],
            on_assign=lambda c, ps: emit(ev="assign", parts=sorted(p.partition for p in ps)),
            on_revoke=lambda c, ps: emit(ev="revoke", parts=sorted(p.partition for p in ps)),
            on_lost=lambda c, ps: emit(ev="lost", parts=sorted(p.partition for p in ps)))
        return consumer

    emit(ev="start", pid=os.getpid(), variant=args.variant)
    consumer = make()
    owned: list[int] = []
    last_owned_check = 0.0
    while not stop.is_set():
        try:
            msgs = consumer.consume(num_messages=200, timeout=0.2)
        except KafkaException as exc:
            err = exc.args[0]
            emit(ev="consume_exception", code=err.name(), fatal=is_fatal(err),
                 text=err.str())
            msgs = []
            if is_fatal(err) and args.recreate_on_fatal:
                consumer.close()
                emit(ev="recreate")
                time.sleep(0.5)
                consumer = make()
            continue
        now = time.time()
        for msg in msgs:
            err = msg.error()
            if err is not None:
                emit(ev="msg_error", code=err.name(), fatal=is_fatal(err), text=err.str())
                if is_fatal(err) and args.recreate_on_fatal:
                    try:
                        consumer.close()
                    except KafkaException:
                        pass
                    emit(ev="recreate")
                    time.sleep(0.5)
                    consumer = make()
                    break
                continue
            emit(ev="m", t=now, p=msg.partition(), o=msg.offset(), s=float(msg.value() or b"nan"))
        if now - last_owned_check > 0.25:
            last_owned_check = now
            try:
                current = sorted(tp.partition for tp in consumer.assignment())
            except KafkaException:
                current = owned
            if current != owned:
                owned = current
                emit(ev="owned", parts=owned)
    consumer.close()
    emit(ev="closed")
    return 0


# --------------------------------------------------------------------------- driver


class Member:
    """A member subprocess and the events it logged."""

    def __init__(self, args: argparse.Namespace, workdir: Path, group: str, topic: str,
                 name: str, generation: int) -> None:
        self.name = name
        self.label = f"{name}#{generation}"
        self.out = workdir / f"{self.label}.jsonl"
        self.err = workdir / f"{self.label}.stderr"
        cmd = [sys.executable, "-m", "benchmarks.takeover", "member", "--variant",
               args.variant, "--bootstrap", args.bootstrap, "--group", group, "--topic",
               topic, "--name", name, "--out", str(self.out)]
        if args.recreate_on_fatal:
            cmd.append("--recreate-on-fatal")
        if args.classic_session_ms is not None:
            cmd += ["--classic-session-ms", str(args.classic_session_ms)]
        with self.err.open("wb") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL,
                                         stderr=err, stdin=subprocess.DEVNULL)
        self._pos = 0
        self.events: list[dict[str, Any]] = []
        self.owned: list[int] = []
        self.last: dict[int, float] = {}

    def refresh(self) -> None:
        if not self.out.exists():
            return
        with self.out.open() as f:
            f.seek(self._pos)
            chunk = f.read()
        done = chunk.rfind("\n") + 1
        self._pos += len(chunk[:done].encode())
        for line in chunk[:done].splitlines():
            event = json.loads(line)
            event["who"] = self.label
            self.events.append(event)
            if event["ev"] == "owned":
                self.owned = event["parts"]
            elif event["ev"] == "m":
                self.last[event["p"]] = event["t"]

    def kill(self) -> float:
        self.proc.send_signal(signal.SIGKILL)
        t = time.time()
        self.proc.wait()
        return t

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.refresh()


class Load:
    """~rate records/s, round-robin over the partitions, value = send time."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "message.timeout.ms": 120_000})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.sent = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        begun = time.monotonic()
        while not self._stop.is_set():
            due = begun + self.sent / self.rate
            wait = due - time.monotonic()
            if wait > 0:
                self.producer.poll(min(wait, 0.05))
                continue
            try:
                self.producer.produce(self.topic, key=str(self.sent).encode(),
                                      value=f"{time.time():.6f}".encode(),
                                      partition=self.sent % self.partitions)
            except BufferError:
                self.producer.poll(0.1)
                continue
            self.sent += 1

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()
        self.producer.flush(30)


def configure_group(bootstrap: str, group: str, session_ms: int, heartbeat_ms: int) -> None:
    set_group_timeouts(bootstrap, [group], Membership("consumer", session_ms, heartbeat_ms))
    print("  group config (session, heartbeat ms):", group_timeouts(bootstrap, group),
          flush=True)


def wait_steady(members: list[Member], partitions: int, timeout: float = 90.0) -> float:
    """Until every partition is owned and consumed within the last second; seconds it took."""
    begun = time.time()
    while time.time() - begun < timeout:
        time.sleep(0.2)
        for m in members:
            m.refresh()
        now = time.time()
        owned = sorted(p for m in members for p in m.owned)
        fresh = {p for m in members for p, t in m.last.items() if now - t < 1.0}
        if owned == list(range(partitions)) and len(fresh) == partitions and \
                all(m.owned for m in members):
            return now - begun
    raise RuntimeError(f"group not steady after {timeout:.0f} s: "
                       f"{[(m.label, m.owned) for m in members]}")


def consumed(members: list[Member]) -> dict[int, list[tuple[float, str, float]]]:
    """partition -> [(receive time, member, send time)] over all members, time order."""
    out: dict[int, list[tuple[float, str, float]]] = {}
    for m in members:
        for e in m.events:
            if e["ev"] == "m":
                out.setdefault(e["p"], []).append((e["t"], m.label, e["s"]))
    for rows in out.values():
        rows.sort()
    return out


def max_gap(times: list[float], start: float, end: float) -> float:
    points = [start, *[t for t in times if start < t < end], end]
    return max(b - a for a, b in itertools.pairwise(points))


def errors(members: list[Member]) -> list[dict[str, Any]]:
    return [{k: e[k] for k in ("who", "t", "ev", "code", "fatal", "text") if k in e}
            for m in members for e in m.events
            if e["ev"] in ("error", "msg_error", "consume_exception", "recreate", "lost")]


def wait_consumed(members: list[Member], parts: list[int], after: float, timeout: float,
                  exclude: str | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        time.sleep(0.2)
        for m in members:
            m.refresh()
        rows = consumed(members)
        if all(any(t > after and who != exclude for t, who, _ in rows.get(p, []))
               for p in parts):
            return


def start_group(args: argparse.Namespace) -> tuple[str, str, Path, Load, list[Member]]:
    """A fresh topic under load and two members of a fresh group reading it: (topic,
    group, the members' folder, load, members)."""
    tag = uuid.uuid4().hex[:6]
    topic, group = f"takeover-{tag}", f"takeover-{args.variant}-{tag}"
    workdir = RESULTS / f"takeover-{tag}"
    workdir.mkdir(parents=True, exist_ok=True)
    ensure_topics(args.bootstrap, [TopicSpec(topic, args.partitions, {}, args.replication)])
    if args.variant.startswith("kip848"):
        configure_group(args.bootstrap, group, args.session_ms, args.heartbeat_ms)
    load = Load(args.bootstrap, topic, args.partitions, args.rate)
    return (topic, group, workdir, load,
            [Member(args, workdir, group, topic, n, 1) for n in ("a", "b")])


def scenario_member_loss(args: argparse.Namespace, restart: bool, run: int) -> dict[str, Any]:
    topic, group, workdir, load, members = start_group(args)
    try:
        steady_s = wait_steady(members, args.partitions)
        time.sleep(args.warmup)
        for m in members:
            m.refresh()
        victim, survivor = members[0], members[1]
        lost = list(victim.owned)
        kept = list(survivor.owned)
        t_kill = victim.kill()
        if restart:
            members.append(Member(args, workdir, group, topic, victim.name, 2))
        wait_consumed(members, lost, t_kill, args.timeout, exclude=victim.label)
        time.sleep(2.0)
        for m in members:
            m.refresh()
        rows = consumed(members)
        takeover: dict[int, float | None] = {}
        by: dict[int, str | None] = {}
        worst_age: dict[int, float] = {}
        for p in lost:
            after = [(t, who, s) for t, who, s in rows.get(p, []) if t > t_kill
                     and who != victim.label]
            takeover[p] = round(after[0][0] - t_kill, 3) if after else None
            by[p] = after[0][1] if after else None
            worst_age[p] = round(max((t - s for t, _, s in after), default=0.0), 3)
        end = t_kill + max((v or args.timeout) for v in takeover.values()) + 1.0
        # The survivor's partitions may move to the restarted member: any live member's
        # consumption counts.
        survivor_gap = {p: round(max_gap([t for t, who, _ in rows.get(p, [])
                                          if who != victim.label], t_kill, end), 3)
                        for p in kept}
        result = {
            "scenario": "restart" if restart else "kill", "run": run, "variant":
            args.variant, "group": group, "topic": topic, "steady_s": round(steady_s, 2),
            "victim_partitions": lost, "survivor_partitions": kept,
            "takeover_s": takeover, "taken_by": by, "worst_record_age_s": worst_age,
            "survivor_max_gap_s": survivor_gap, "errors": errors(members)[:50],
        }
        return result
    finally:
        for m in members:
            m.stop()
        load.stop()
        delete_topics(args.bootstrap, [topic])


def restart_coordinator(bootstrap: str, group: str, down_s: float) -> tuple[int, float]:
    """Stop (SIGTERM) the node coordinating ``group``, wait, start it; (node, stop s)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    node = described.coordinator.id
    pid = localstack.kafka.running_pid(node)
    if pid is None:
        raise RuntimeError(f"coordinator node {node} is not one of this stack's")
    begun = time.time()
    os.kill(pid, signal.SIGTERM)
    while localstack.kafka.running_pid(node) is not None and time.time() - begun < 60:
        time.sleep(0.1)
    stopped = time.time() - begun
    time.sleep(down_s)
    localstack.up(only="kafka")
    return node, stopped


def scenario_broker_restart(args: argparse.Namespace, run: int,
                            coordinator_only: bool = False) -> dict[str, Any]:
    topic, group, _workdir, load, members = start_group(args)
    try:
        wait_steady(members, args.partitions)
        time.sleep(args.warmup)
        t_down = time.time()
        node = None
        if coordinator_only:
            node, stop_s = restart_coordinator(args.bootstrap, group, args.broker_down_s)
            t_stopped = t_down + stop_s
        else:
            localstack.down(only="kafka")
            t_stopped = time.time()
            time.sleep(args.broker_down_s)
            localstack.up(only="kafka")
        t_up = time.time()
        parts = list(range(args.partitions))
        wait_consumed(members, parts, t_up, args.timeout)
        time.sleep(3.0)
        for m in members:
            m.refresh()
        rows = consumed(members)
        resume = {}
        for p in parts:
            after = [t for t, _, _ in rows.get(p, []) if t > t_up]
            resume[p] = round(after[0] - t_up, 3) if after else None
        # A member fenced after it resumed (a fatal error on its next commit) stops again:
        # seconds since each partition was last consumed, when the scenario ends.
        t_end = time.time()
        idle_at_end = {p: round(t_end - max((t for t, _, _ in rows.get(p, [])), default=0), 2)
                       for p in parts}
        # Longest pause per partition from the stop on (consumption may go on while a
        # node of three is down; the whole pause is what a customer sees).
        paused = {p: round(max_gap([t for t, _, _ in rows.get(p, [])], t_down, t_end), 2)
                  for p in parts}
        alive = {m.label: m.proc.poll() is None for m in members}
        owned = {m.label: m.owned for m in members}
        # Still a working group afterwards? Kill one member and see who takes over.
        return {
            "scenario": "broker-restart", "run": run, "variant": args.variant,
            "restarted": f"coordinator node {node}" if coordinator_only else "all nodes",
            "group": group, "stop_s": round(t_stopped - t_down, 2),
            "start_s": round(t_up - t_stopped - args.broker_down_s, 2),
            "resume_after_ready_s": resume, "idle_at_end_s": idle_at_end,
            "max_pause_s": paused, "alive": alive,
            "owned_after": owned,
            "errors": errors(members)[:80],
        }
    finally:
        for m in members:
            m.stop()
        load.stop()
        try:
            delete_topics(args.bootstrap, [topic])
        except Exception as exc:
            print("  topic not deleted:", exc)


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for scenario in ("kill", "restart"):
        rs = [r for r in results if r["scenario"] == scenario]
        if not rs:
            continue
        vals = [v for r in rs for v in r["takeover_s"].values()]
        ok = [v for v in vals if v is not None]
        gaps = [v for r in rs for v in r["survivor_max_gap_s"].values()]
        summary[scenario] = {
            "runs": len(rs), "partitions": len(vals), "never_taken_over": len(vals) - len(ok),
            "median_s": round(statistics.median(ok), 2) if ok else None,
            "max_s": round(max(ok), 2) if ok else None,
            "per_run_max_s": [max((v for v in r["takeover_s"].values() if v is not None),
                                  default=None) for r in rs],
            "survivor_max_gap_s": round(max(gaps), 2) if gaps else None,
            "errors": sum(len(r["errors"]) for r in rs),
        }
    br = [r for r in results if r["scenario"] == "broker-restart"]
    if br:
        summary["broker-restart"] = [
            {"resume_max_s": max((v for v in r["resume_after_ready_s"].values()
                                  if v is not None), default=None),
             "never_resumed": [p for p, v in r["resume_after_ready_s"].items() if v is None],
             "stalled_at_end": [p for p, v in r.get("idle_at_end_s", {}).items() if v > 2.0],
             "max_pause_s": max(r.get("max_pause_s", {}).values(), default=None),
             "alive": r["alive"],
             "fatal": sorted({e["code"] for e in r["errors"] if e.get("fatal")}),
             "error_codes": sorted({e.get("code", e["ev"]) for e in r["errors"]})}
            for r in br]
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    m = sub.add_parser("member", help="(internal) one group member")
    for p in (parser, m):
        p.add_argument("--variant", choices=VARIANTS, default="classic")
        p.add_argument("--recreate-on-fatal", action="store_true",
                       help="members close and recreate their consumer on a fatal error")
        p.add_argument("--classic-session-ms", type=int, default=None,
                       help="classic/static: session.timeout.ms instead of the services' "
                       "(heartbeat a quarter of it); the broker's group.min.session.timeout.ms "
                       "must allow it")
    m.add_argument("--bootstrap", required=True)
    m.add_argument("--group", required=True)
    m.add_argument("--topic", required=True)
    m.add_argument("--name", required=True)
    m.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scenarios", nargs="+", default=["kill", "restart"],
                        choices=["kill", "restart", "broker-restart",
                                 "coordinator-restart"])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=200.0, help="records/s")
    parser.add_argument("--warmup", type=float, default=3.0,
                        help="seconds of steady consumption before the kill")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="give up waiting for a takeover after this many seconds")
    parser.add_argument("--session-ms", type=int, default=6000,
                        help="kip848: the group's consumer.session.timeout.ms")
    parser.add_argument("--heartbeat-ms", type=int, default=1500,
                        help="kip848: the group's consumer.heartbeat.interval.ms")
    parser.add_argument("--broker-down-s", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.command == "member":
        return run_member(args)

    localstack.up(only="kafka")
    args.bootstrap = localstack.env()["HOOKSTREAM_KAFKA_BOOTSTRAP"]
    brokers = localstack.kafka.brokers()
    args.replication = 3 if brokers >= 3 else 1
    RESULTS.mkdir(exist_ok=True)
    results: list[dict[str, Any]] = []
    for run in range(1, args.runs + 1):
        for scenario in args.scenarios:
            print(f"{args.variant} run {run} {scenario} ...", flush=True)
            if scenario in ("broker-restart", "coordinator-restart"):
                r = scenario_broker_restart(args, run, scenario == "coordinator-restart")
                print("  resume after broker ready:", r["resume_after_ready_s"],
                      "idle at end:", r["idle_at_end_s"], "max pause:", r["max_pause_s"],
                      "alive:", r["alive"], "errors:",
                      sorted({e.get("code", e["ev"]) for e in r["errors"]}), flush=True)
            else:
                r = scenario_member_loss(args, scenario == "restart", run)
                print("  takeover:", r["takeover_s"], "by", r["taken_by"],
                      "survivor gap:", r["survivor_max_gap_s"], "errors:", len(r["errors"]),
                      flush=True)
            results.append(r)
    summary = summarize(results)
    config = {"variant": args.variant, "brokers": brokers, "rate": args.rate,
              "partitions": args.partitions, "recreate_on_fatal": args.recreate_on_fatal}
    if args.variant.startswith("kip848"):
        config.update(session_ms=args.session_ms, heartbeat_ms=args.heartbeat_ms)
    elif args.classic_session_ms is not None:
        config.update(session_ms=args.classic_session_ms)
    out = RESULTS / f"takeover-{args.variant}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"config": config, "summary": summary, "runs": results},
                              indent=1))
    print(json.dumps({"config": config, "summary": summary}, indent=1))
    print("results:", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
