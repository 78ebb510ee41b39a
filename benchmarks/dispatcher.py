"""Dispatcher throughput against a fast local receiver, beside a bare aiohttp client
against the same receiver on the same machine, in the same run.

    .venv/bin/python benchmarks/dispatcher.py [--deliveries 30000] [--endpoints 200]
    .venv/bin/python benchmarks/dispatcher.py --backlog 1000000   # memory with one endpoint's
                                                                  # million-task backlog

Prints a table and writes bench-results/dispatcher.json.
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
    cpu_by_role,
    cpu_delta,
    drop_database,
    drop_topics,
    encode_tasks,
    fresh_env,
    insert_deliveries,
    load_deliveries,
    proc_stats,
    produce_tasks,
    rss,
    start_fast_receiver,
    wait_group_stable,
)
from hookstream.endpoints import create_endpoint
from hookstream.harness import ServiceProcess, pipeline_env
from hookstream.signing import generate_secret, webhook_headers

PROFILE = bool(os.environ.get("HOOKSTREAM_BENCH_PROFILE")) and shutil.which("py-spy") is not None
BODY = b'{"bench": true, "padding": "' + b"x" * 200 + b'"}'


async def bare_client(port: int, n: int, concurrency: int) -> float:
    """The yardstick: the same POSTs (signed, same body) with a plain aiohttp client."""
    secret = generate_secret()
    url = f"http://127.0.0.1:{port}/hooks/bare"
    connector = aiohttp.TCPConnector(limit=concurrency)
    sent = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal sent
        while sent < n:
            sent += 1
            headers = webhook_headers([secret], "msg", int(time.time()), BODY)
            async with session.post(url, data=BODY, headers=headers) as resp:
                await resp.read()

    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return n / (time.perf_counter() - t0)


def dispatcher_run(port: int, n: int, n_endpoints: int, processes: int) -> dict[str, Any]:
    db, bootstrap, topics = fresh_env(f"disp{processes}")
    with psycopg.connect(db) as conn:
        for i in range(n_endpoints):
            create_endpoint(conn, tenant=f"t{i % 10}", url=f"http://127.0.0.1:{port}/hooks/e{i}",
                            rate_per_s=1e6, burst=1_000_000, max_in_flight=64,
                            allow_insecure=True)
    tasks = encode_tasks(insert_deliveries(db, endpoints=[str(i) for i in range(n_endpoints)],
                                           n=n, payload=BODY))
    env = pipeline_env(database_url=db, bootstrap=bootstrap, topic_prefix=topics.prefix,
                       allow_private_targets="true", tenant_max_in_flight="10000",
                       tenant_rate_per_s="1000000", tenant_burst="1000000",
                       dispatcher_max_in_flight=str(512 // processes), log_format="json",
                       log_level="WARNING")
    log_dir = RESULTS / "logs"
    procs = [ServiceProcess("dispatcher", env, log_dir / f"bench-dispatcher-{processes}-{i}.log")
             for i in range(processes)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.wait_healthy()
    # The tasks go out once every dispatcher holds its partitions: the figure is the
    # steady rate, not start-up rebalancing (seconds, with two processes).
    wait_group_stable(bootstrap, env["HOOKSTREAM_DISPATCHER_GROUP_ID"], processes)
    cpu_before = cpu_by_role()
    produce_tasks(bootstrap, topics, tasks)
    spy = None
    if PROFILE and procs[0].proc is not None:
        # py-spy samples the live process: collapsed stacks for the hot-path summary.
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(procs[0].proc.pid),
                                "--format", "raw", "--rate", "250", "--nonblocking", "--gil",
                                "-o", str(RESULTS / f"dispatcher-profile-{processes}.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    gauges: list[dict[str, float]] = []  # per sample and process: in flight, queued
    with psycopg.connect(db, autocommit=True) as conn:
        while time.monotonic() < deadline:
            for p in procs:
                gauges.append(_gauges(p))
            (done,), = conn.execute(
                "SELECT count(*) FROM deliveries WHERE status = 'delivered'").fetchall()
            if done >= n:
                break
            time.sleep(0.25)
        (first, last, attempts), = conn.execute(
            "SELECT min(started_at), max(finished_at), count(*) FROM attempts").fetchall()
    elapsed = (last - first).total_seconds()
    cpu = cpu_delta(cpu_before, cpu_by_role())
    stats = [proc_stats(p.proc.pid) for p in procs if p.proc]  # type: ignore[union-attr]
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    for p in procs:
        p.terminate()
    drop_topics(bootstrap, topics)
    drop_database(db)
    return {
        "processes": processes, "deliveries": n, "delivered": done, "attempts": attempts,
        "seconds": round(elapsed, 2), "attempts_per_s": round(attempts / elapsed),
        "wall_seconds_incl_startup": round(time.monotonic() - t0, 1),
        "cpu_seconds": round(sum(c for c, _ in stats), 1),
        "cpu_ms_per_attempt": round(1000 * sum(c for c, _ in stats) / attempts, 3),
        "peak_rss_mb": [round(r / 2**20) for _, r in stats],
        # Every process's CPU from dispatcher start to the last delivery, per attempt:
        # where the two cores went (PostgreSQL's claims and outcome writes, the receiver).
        # Where a process waits: few in flight with a long queue means the claim/send
        # side is the limit; an empty queue means reading tasks is.
        "mean_in_flight_per_process": round(
            sum(g.get("in_flight", 0) for g in gauges) / max(len(gauges), 1), 1),
        "mean_queued_per_process": round(
            sum(g.get("queued", 0) for g in gauges) / max(len(gauges), 1), 1),
        "machine_cpu_ms_per_attempt": {k: round(1000 * v / attempts, 3)
                                       for k, v in sorted(cpu.items())},
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
            n_bare = min(args.deliveries, 30_000)

            def yardstick() -> dict[str, float]:
                return {"asyncio": asyncio.run(bare_client(port, n_bare, 256)),
                        "uvloop": uvloop.run(bare_client(port, n_bare, 256))}

            # The yardstick on both loops, before and after the dispatcher runs; the
            # fastest of the four counts. The dispatcher runs on uvloop, so quoting it
            # against asyncio's slower loop would flatter it, and one short run of the
            # bare client alone swings by ±20 % with whatever else the host is doing.
            before = yardstick()
            out["runs"] = [dispatcher_run(port, args.deliveries, args.endpoints, p)
                           for p in args.processes]
            after = yardstick()
            bare = max(*before.values(), *after.values())
            out["bare_aiohttp_req_per_s"] = {
                f"{k} {when}": round(v) for when, d in (("before", before), ("after", after))
                for k, v in d.items()}
            out["yardstick_req_per_s"] = round(bare)
            print("\nbare aiohttp client (256 concurrent, signed), req/s: " + ", ".join(
                f"{k} {v:,}" for k, v in out["bare_aiohttp_req_per_s"].items())
                + f"; yardstick {bare:,.0f}")
            print(f"{'dispatchers':>11} {'attempts/s':>11} {'vs bare':>8} {'cpu ms/att':>11}"
                  f" {'peak RSS MB':>12}")
            for r in out["runs"]:
                print(f"{r['processes']:>11} {r['attempts_per_s']:>11,} "
                      f"{r['attempts_per_s'] / bare:>8.0%} {r['cpu_ms_per_attempt']:>11}"
                      f" {r['peak_rss_mb']!s:>12}")
                print(f"{'':>11} machine CPU ms per attempt: {r['machine_cpu_ms_per_attempt']}")
                print(f"{'':>11} mean per process: {r['mean_in_flight_per_process']} in flight,"
                      f" {r['mean_queued_per_process']} queued")
    finally:
        receiver.terminate()
    name = "dispatcher-backlog.json" if args.backlog else "dispatcher.json"
    Path(RESULTS / name).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
