"""Dispatcher throughput against a fast local receiver, beside a bare aiohttp client
against the same receiver on the same machine, in the same run, both measured the same
way:

* the same requests (signed, same body), as many on each side (``--deliveries``);
* the same concurrency, one option (``--concurrency``): the bare client's requests in
  flight, and the dispatchers' in total (split evenly over the processes);
* the same untimed warm-up first (``--warmup``): connections opened, caches warm, so
  neither clock includes session set-up;
* the bare client's clock: first timed request sent → last response read; the
  dispatcher's: its tasks start going to the deliveries topic (ingest included) → the
  database shows every delivery ``delivered`` and every attempt row finished
  (committed: the outcome durably recorded; polled, at most 10 ms late);
* CPU per attempt from that same window, like the machine's CPU by role (this run's
  processes only; other people's work on the shared cores is reported as ``others``).

    .venv/bin/python -m benchmarks.dispatcher [--deliveries 30000] [--concurrency 256]
    .venv/bin/python -m benchmarks.dispatcher --backlog 1000000   # memory with one
                                                                  # endpoint's million-task
                                                                  # backlog

Prints a table and writes bench-results/dispatcher.json (or ``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import uvloop

from benchmarks.common import (
    RESULTS,
    busy_fraction,
    cpu_by_role,
    cpu_delta,
    drop_database,
    drop_topics,
    encode_tasks,
    fresh_env,
    insert_deliveries,
    load_deliveries,
    machine_cpu,
    proc_stats,
    produce_tasks,
    rss,
    stack_pids,
    start_fast_receiver,
    wait_group_stable,
)
from hookstream.core.signing import generate_secret, webhook_headers
from hookstream.dev.harness import ServiceProcess, pipeline_env
from hookstream.endpoints import create_endpoint

PROFILE = bool(os.environ.get("HOOKSTREAM_BENCH_PROFILE")) and shutil.which("py-spy") is not None
BODY = b'{"bench": true, "padding": "' + b"x" * 200 + b'"}'
DEFAULT_CONCURRENCY = 512  # the dispatcher's own default (HOOKSTREAM_DISPATCHER_MAX_IN_FLIGHT)
DEFAULT_WARMUP = 2000


async def measure_bare_client(port: int, n: int, concurrency: int,
                              warmup: int = 0) -> dict[str, float]:
    """The yardstick: the same POSTs (signed, same body) with a plain aiohttp client,
    ``concurrency`` in flight. ``warmup`` untimed requests go first (they open the
    connections: the session is set up), then the clock and this process's CPU clock run
    over the n timed requests. Returns req/s and CPU-ms per request."""
    secret = generate_secret()
    url = f"http://127.0.0.1:{port}/hooks/bare"
    connector = aiohttp.TCPConnector(limit=concurrency)

    async def send(session: aiohttp.ClientSession, count: int) -> None:
        sent = 0

        async def worker() -> None:
            nonlocal sent
            while sent < count:
                sent += 1
                headers = webhook_headers([secret], "msg", int(time.time()), BODY)
                async with session.post(url, data=BODY, headers=headers) as resp:
                    await resp.read()

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    async with aiohttp.ClientSession(connector=connector) as session:
        if warmup:
            await send(session, warmup)
        cpu0, t0 = time.process_time(), time.perf_counter()
        await send(session, n)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    return {"req_per_s": n / elapsed, "cpu_ms_per_request": 1000 * cpu / n}


async def bare_client(port: int, n: int, concurrency: int) -> float:
    """req/s of the bare client, its connections opened inside the clock (the pipeline
    benchmark's yardstick)."""
    return (await measure_bare_client(port, n, concurrency))["req_per_s"]


# The end of the dispatcher's window is seen by polling the database: coarsely while
# most of the work is ahead, finely near the end, so the poll neither loads PostgreSQL
# nor adds more than FINE_POLL_S to the window.
COARSE_POLL_S = 0.25
FINE_POLL_S = 0.01
_PROGRESS = ("SELECT count(*) FILTER (WHERE status = 'delivered'),"
             " (SELECT count(*) FROM attempts WHERE finished_at IS NULL) FROM deliveries")


def _wait_recorded(conn: psycopg.Connection[Any], total: int, procs: list[ServiceProcess],
                   gauges: list[dict[str, float]] | None, timeout_s: float = 600) -> float:
    """Until every one of ``total`` deliveries is ``delivered`` and no attempt row is
    left unfinished, both committed (visible to this connection). Returns the monotonic
    time just before the query that saw it: the window's end, late by at most one poll."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gauges is not None:
            for p in procs:
                gauges.append(_gauges(p))
        seen_at = time.monotonic()
        (done, unfinished), = conn.execute(_PROGRESS).fetchall()
        if done >= total and unfinished == 0:
            return seen_at
        time.sleep(FINE_POLL_S if done >= 0.9 * total else COARSE_POLL_S)
    raise TimeoutError(f"{total} deliveries not recorded within {timeout_s} s")


def dispatcher_run(port: int, n: int, n_endpoints: int, processes: int, *, concurrency: int,
                   warmup: int, receiver_pid: int) -> dict[str, Any]:
    """n deliveries through ``processes`` dispatchers holding ``concurrency`` attempts in
    flight between them. ``warmup`` deliveries go first, untimed (connections opened,
    caches and prepared statements warm, like the bare client's warm-up); then the clock
    runs from the moment the n tasks start going to the deliveries topic until the
    database shows all n delivered with their attempt rows finished. CPU (the
    dispatchers' and every role's) is read over that same window."""
    db, bootstrap, topics = fresh_env(f"disp{processes}")
    with psycopg.connect(db) as conn:
        for i in range(n_endpoints):
            create_endpoint(conn, tenant=f"t{i % 10}", url=f"http://127.0.0.1:{port}/hooks/e{i}",
                            rate_per_s=1e6, burst=1_000_000, max_in_flight=64,
                            allow_insecure=True)
    rows = insert_deliveries(db, endpoints=[str(i) for i in range(n_endpoints)],
                             n=n + warmup, payload=BODY)
    warm_tasks, tasks = encode_tasks(rows[:warmup]), encode_tasks(rows[warmup:])
    env = pipeline_env(database_url=db, bootstrap=bootstrap, topic_prefix=topics.prefix,
                       allow_private_targets="true", tenant_max_in_flight="10000",
                       tenant_rate_per_s="1000000", tenant_burst="1000000",
                       dispatcher_max_in_flight=str(concurrency // processes),
                       log_format="json", log_level="WARNING")
    log_dir = RESULTS / "logs"
    procs = [ServiceProcess("dispatcher", env, log_dir / f"bench-dispatcher-{processes}-{i}.log")
             for i in range(processes)]
    t_start = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.wait_healthy()
    # The tasks go out once every dispatcher holds its partitions: the figure is the
    # steady rate, not start-up rebalancing (seconds, with two processes).
    wait_group_stable(bootstrap, env["HOOKSTREAM_DISPATCHER_GROUP_ID"], processes)
    own = {p.proc.pid: "dispatcher" for p in procs if p.proc} | {receiver_pid: "receiver"}
    stack = stack_pids()
    gauges: list[dict[str, float]] = []  # per sample and process: in flight, queued
    with psycopg.connect(db, autocommit=True) as conn:
        if warm_tasks:
            produce_tasks(bootstrap, topics, warm_tasks)
            _wait_recorded(conn, warmup, procs, None)
        spy = None
        if PROFILE and procs[0].proc is not None:
            # py-spy samples the live process: collapsed stacks for the hot-path summary.
            spy = subprocess.Popen(["py-spy", "record", "--pid", str(procs[0].proc.pid),
                                    "--format", "raw", "--rate", "250", "--nonblocking",
                                    "--gil", "-o",
                                    str(RESULTS / f"dispatcher-profile-{processes}.txt")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        cpu_before, machine_before = cpu_by_role(own, stack), machine_cpu()
        t0 = time.monotonic()
        produce_tasks(bootstrap, topics, tasks)
        t1 = _wait_recorded(conn, n + warmup, procs, gauges)
        cpu, busy = cpu_delta(cpu_before, cpu_by_role(own, stack)), busy_fraction(
            machine_before, machine_cpu())
        (first, last, attempts, delivered), = conn.execute(
            "SELECT min(a.started_at), max(a.finished_at), count(*),"
            "       count(*) FILTER (WHERE d.status = 'delivered')"
            " FROM attempts a JOIN deliveries d USING (delivery_id)"
            " WHERE a.delivery_id = ANY(%s)", ([r[0] for r in rows[warmup:]],)).fetchall()
    elapsed = t1 - t0
    http_window = (last - first).total_seconds()
    lifetime = [proc_stats(p.proc.pid) for p in procs if p.proc]
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    for p in procs:
        p.terminate()
    drop_topics(bootstrap, topics)
    drop_database(db)
    return {
        "processes": processes, "concurrency": concurrency,
        "max_in_flight_per_process": concurrency // processes,
        "deliveries": n, "warmup_deliveries": warmup, "delivered": delivered,
        "attempts": attempts,
        # The window: tasks start going out → the last outcome committed (seen by a poll
        # at most FINE_POLL_S late).
        "seconds": round(elapsed, 3), "attempts_per_s": round(attempts / elapsed),
        # The old window (first HTTP start → last HTTP finish, from the attempt rows):
        # ingest and the outcome-writing tail left out. Kept to show what it hid.
        "http_window_seconds": round(http_window, 3),
        "http_window_attempts_per_s": round(attempts / http_window),
        "wall_seconds_incl_startup": round(time.monotonic() - t_start, 1),
        "cpu_seconds": round(cpu.get("dispatcher", 0.0), 2),
        "cpu_ms_per_attempt": round(1000 * cpu.get("dispatcher", 0.0) / attempts, 3),
        # Over the process's whole life (start-up, group join, warm-up included): the
        # figure this script reported before 2026-12-01 (honesty).
        "cpu_ms_per_attempt_lifetime": round(1000 * sum(c for c, _ in lifetime) / attempts, 3),
        "peak_rss_mb": [round(r / 2**20) for _, r in lifetime],
        # Where a process waits: few in flight with a long queue means the claim/send
        # side is the limit; an empty queue means reading tasks is.
        "mean_in_flight_per_process": round(
            sum(g.get("in_flight", 0) for g in gauges) / max(len(gauges), 1), 1),
        "mean_queued_per_process": round(
            sum(g.get("queued", 0) for g in gauges) / max(len(gauges), 1), 1),
        # Every process's CPU over the same window, per attempt: this run's processes by
        # role (PostgreSQL's claims and outcome writes, the receiver, the script's own
        # producing and polling), other people's processes as ``others``.
        "machine_cpu_ms_per_attempt": {k: round(1000 * v / attempts, 3)
                                       for k, v in sorted(cpu.items())},
        "machine_busy": round(busy, 3),
    }


def _gauges(proc: ServiceProcess) -> dict[str, float]:
    try:
        _, body = proc.get("/metrics")
    except OSError:
        return {}
    out = {}
    for line in body.decode().splitlines():
        for name in ("in_flight", "queued"):
            if line.startswith(f"hookstream_dispatcher_{name} "):
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def backlog_run(port: int, n: int) -> dict[str, Any]:
    """One endpoint (5/s) with an n-task backlog: the dispatcher defers what it cannot
    drain soon to the delay tiers, so its memory must stay flat while it reads all n."""
    db, bootstrap, topics = fresh_env("backlog")
    with psycopg.connect(db) as conn:
        create_endpoint(conn, tenant="big", url=f"http://127.0.0.1:{port}/hooks/slow",
                        rate_per_s=5, burst=5, allow_insecure=True)
    load_deliveries(db, bootstrap, topics, endpoints=["slow"], tenants=[], n=n)
    env = pipeline_env(database_url=db, bootstrap=bootstrap, topic_prefix=topics.prefix,
                       allow_private_targets="true", log_level="WARNING")
    proc = ServiceProcess("dispatcher", env, RESULTS / "logs" / "bench-backlog.log").start()
    proc.wait_healthy()
    samples: list[tuple[float, float, int]] = []  # (t, rss MB, deferred so far)
    t0 = time.monotonic()
    deferred = 0
    while time.monotonic() - t0 < 900:
        _, metrics = proc.get("/metrics")
        deferred = int(sum(float(line.rsplit(" ", 1)[1]) for line in metrics.decode().splitlines()
                           if line.startswith("hookstream_dispatcher_deferred_total{")))
        assert proc.proc is not None
        samples.append((round(time.monotonic() - t0, 1), round(rss(proc.proc.pid) / 2**20, 1),
                        deferred))
        if deferred >= n - 100:
            break
        time.sleep(2)
    assert proc.proc is not None
    _, peak = proc_stats(proc.proc.pid)
    proc.terminate()
    drop_topics(bootstrap, topics)
    drop_database(db)
    rss_values = [s[1] for s in samples]
    return {"backlog": n, "tasks_read_and_deferred": deferred,
            "seconds": samples[-1][0] if samples else None,
            "rss_mb_first": rss_values[0] if rss_values else None,
            "rss_mb_at_10pct": next((s[1] for s in samples if s[2] >= n * 0.1), None),
            "rss_mb_at_50pct": next((s[1] for s in samples if s[2] >= n * 0.5), None),
            "rss_mb_last": rss_values[-1] if rss_values else None,
            "peak_rss_mb": round(peak / 2**20, 1), "samples": samples}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deliveries", type=int, default=30_000)
    ap.add_argument("--endpoints", type=int, default=200)
    ap.add_argument("--backlog", type=int, default=0)
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2],
                    help="dispatcher process counts to run, one run each")
    ap.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                    help="requests in flight: the bare client's, and the dispatchers' in"
                         " total (HOOKSTREAM_DISPATCHER_MAX_IN_FLIGHT = this / processes)")
    ap.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                    help="untimed requests (bare client) and deliveries (dispatcher) before"
                         " each clock starts")
    ap.add_argument("--json", type=Path, default=None,
                    help="where to write the results (default bench-results/dispatcher.json)")
    args = ap.parse_args()
    RESULTS.mkdir(exist_ok=True)
    receiver, port = start_fast_receiver()
    out: dict[str, Any] = {}
    try:
        if args.backlog:
            out["backlog"] = backlog_run(port, args.backlog)
            print(json.dumps({k: v for k, v in out["backlog"].items() if k != "samples"},
                             indent=1))
        else:
            def yardstick() -> dict[str, dict[str, float]]:
                return {"asyncio": asyncio.run(measure_bare_client(
                            port, args.deliveries, args.concurrency, args.warmup)),
                        "uvloop": uvloop.run(measure_bare_client(
                            port, args.deliveries, args.concurrency, args.warmup))}

            # The yardstick on both loops, before and after the dispatcher runs; the
            # fastest of the four counts. The dispatcher runs on uvloop, so quoting it
            # against asyncio's slower loop would flatter it, and one short run of the
            # bare client alone swings by ±20 % with whatever else the host is doing.
            # Same requests, same concurrency, same warm-up as the dispatcher's runs.
            before = yardstick()
            out["runs"] = [dispatcher_run(port, args.deliveries, args.endpoints, p,
                                          concurrency=args.concurrency, warmup=args.warmup,
                                          receiver_pid=receiver.pid)
                           for p in args.processes]
            after = yardstick()
            bare_runs = {f"{k} {when}": v for when, d in (("before", before), ("after", after))
                         for k, v in d.items()}
            fastest = max(bare_runs.values(), key=lambda v: v["req_per_s"])
            bare = fastest["req_per_s"]
            out["concurrency"] = args.concurrency
            out["warmup"] = args.warmup
            out["bare_aiohttp_req_per_s"] = {k: round(v["req_per_s"])
                                             for k, v in bare_runs.items()}
            out["bare_aiohttp_cpu_ms_per_request"] = {
                k: round(v["cpu_ms_per_request"], 3) for k, v in bare_runs.items()}
            out["yardstick_req_per_s"] = round(bare)
            out["yardstick_cpu_ms_per_request"] = round(fastest["cpu_ms_per_request"], 3)
            for r in out["runs"]:
                r["vs_yardstick"] = round(r["attempts_per_s"] / bare, 3)
            print(f"\nbare aiohttp client ({args.concurrency} concurrent, signed,"
                  f" {args.warmup} warm-up requests first), req/s: " + ", ".join(
                      f"{k} {v:,}" for k, v in out["bare_aiohttp_req_per_s"].items())
                  + f"; yardstick {bare:,.0f} ({out['yardstick_cpu_ms_per_request']}"
                  " CPU-ms per request)")
            print(f"{'dispatchers':>11} {'attempts/s':>11} {'vs bare':>8} {'cpu ms/att':>11}"
                  f" {'HTTP-only window':>17} {'peak RSS MB':>12} {'busy':>5}")
            for r in out["runs"]:
                print(f"{r['processes']:>11} {r['attempts_per_s']:>11,} "
                      f"{r['vs_yardstick']:>8.0%} {r['cpu_ms_per_attempt']:>11}"
                      f" {r['http_window_attempts_per_s']:>15,}/s"
                      f" {r['peak_rss_mb']!s:>12} {r['machine_busy']:>5.0%}")
                print(f"{'':>11} machine CPU ms per attempt: {r['machine_cpu_ms_per_attempt']}")
                print(f"{'':>11} mean per process: {r['mean_in_flight_per_process']} in flight,"
                      f" {r['mean_queued_per_process']} queued")
    finally:
        receiver.terminate()
    name = "dispatcher-backlog.json" if args.backlog else "dispatcher.json"
    (args.json or RESULTS / name).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
