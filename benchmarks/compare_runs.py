"""Pipeline benchmark runs side by side, CPU quoted against the run's own yardstick.

On a shared two-core host the same code gives 2,300 or 3,300 deliveries/s depending on
the neighbours (BENCHMARKS.md, "How figures travel with the host"), so throughput alone
compares little across runs. Each pipeline run (``benchmarks.pipeline``) also measures the
benchmark's own receivers, whose work per delivery is the same whatever the code under
test: the pipeline's CPU per delivery divided by theirs is a ratio the host's speed mostly
cancels out of — between runs with the same farm (``--receiver-server``): the Go farm costs
about half of uvicorn's.

    python -m benchmarks.compare_runs old=bench-results/pipeline-s-old-*.json \\
        new=bench-results/pipeline-s-new-*.json

prints one row per run and the mean of each group: throughput during the load, busy %,
commit → arrival p50 / p99 when the run measured it, CPU milliseconds per delivery of
each pipeline process, their sum, the receivers' mean, the sum over the receivers', and
the host's speed during the load (ms of CPU per yardstick unit, median: higher is slower;
benchmarks/host_speed.py) for runs that sampled it, and beside it the loopback
yardstick's (``lo``: ms of CPU per 1,000 TCP round trips on 127.0.0.1, which caught a slow
host the first one read as fast).
"""

from __future__ import annotations

import argparse
import glob
import json
from dataclasses import dataclass
from statistics import mean
from typing import Any

PIPELINE = ("relay", "fanout", "dispatcher", "kafka", "postgres")


@dataclass(frozen=True)
class Run:
    label: str
    throughput: float
    busy_pct: float
    p50_ms: float | None
    p99_ms: float | None
    cpu_ms: dict[str, float]  # per delivery, by process
    receiver_ms: float  # per delivery, the mean of the receiver processes
    host_ms: float | None  # the yardstick's median during the load (None: not sampled)
    loopback_ms: float | None = None  # the loopback yardstick's median (runs since 12-07)

    @property
    def pipeline_ms(self) -> float:
        return sum(self.cpu_ms.values())

    @property
    def ratio(self) -> float:
        return self.pipeline_ms / self.receiver_ms


def service_cpu(procs: dict[str, Any], service: str) -> float:
    """CPU-ms per delivery of every process of ``service``: with ``--replicas 2`` the
    pipeline runs ``dispatcher`` and ``dispatcher2``, and both do the work."""
    return sum(v["cpu_ms_per_delivery"] for k, v in procs.items()
               if k == service or (k.startswith(service) and k[len(service):].isdigit()))


def read(path: str) -> Run:
    with open(path) as f:
        d: dict[str, Any] = json.load(f)
    procs = d["processes"]
    total = (d.get("latency_budget") or {}).get("p50_p99_ms", {}).get("commit→arrival")
    return Run(
        label=d.get("label") or path,
        throughput=d["measure"]["healthy_delivered_per_s_during_load"],
        busy_pct=d["machine_busy_pct"], p50_ms=total[0] if total else None,
        p99_ms=total[1] if total else None,
        cpu_ms={p: service_cpu(procs, p) for p in PIPELINE},
        # however many receiver processes the run had (--receivers)
        receiver_ms=mean(v["cpu_ms_per_delivery"] for k, v in procs.items()
                         if k.startswith("receiver")),
        host_ms=(d.get("host_speed_ms_per_unit") or {}).get("during_load", {}).get("p50"),
        loopback_ms=(d.get("host_loopback_ms_per_unit") or {}).get("during_load", {})
        .get("p50"))


def _row(name: str, throughput: float, busy: float, p50: float | None, p99: float | None,
         cpu: dict[str, float], pipeline: float, receivers: float, ratio: float,
         host: float | None, loopback: float | None) -> str:
    latency = (f"{p50:6.1f} {p99:6.1f}" if p50 is not None and p99 is not None
               else f"{'-':>6} {'-':>6}")
    procs = " ".join(f"{cpu[p]:7.3f}" for p in PIPELINE)
    return (f"{name:<22} {throughput:7.0f} {busy:5.1f} {latency} {procs} {pipeline:7.3f} "
            f"{receivers:7.3f} {ratio:6.2f} "
            + " ".join(f"{v:6.1f}" if v else f"{'-':>6}" for v in (host, loopback)))


def report(groups: dict[str, list[Run]]) -> list[str]:
    head = (f"{'run':<22} {'del/s':>7} {'busy':>5} {'p50':>6} {'p99':>6} "
            + " ".join(f"{p[:7]:>7}" for p in PIPELINE)
            + f" {'sum':>7} {'recv':>7} {'ratio':>6} {'host':>6} {'lo':>6}")
    lines = [head]
    for name, runs in groups.items():
        for r in runs:
            lines.append(_row(r.label, r.throughput, r.busy_pct, r.p50_ms, r.p99_ms, r.cpu_ms,
                              r.pipeline_ms, r.receiver_ms, r.ratio, r.host_ms,
                              r.loopback_ms))
        timed = [r for r in runs if r.p50_ms is not None and r.p99_ms is not None]
        lines.append(_row(
            f"= {name} (mean of {len(runs)})", mean(r.throughput for r in runs),
            mean(r.busy_pct for r in runs),
            mean(r.p50_ms for r in timed if r.p50_ms is not None) if timed else None,
            mean(r.p99_ms for r in timed if r.p99_ms is not None) if timed else None,
            {p: mean(r.cpu_ms[p] for r in runs) for p in PIPELINE},
            mean(r.pipeline_ms for r in runs), mean(r.receiver_ms for r in runs),
            mean(r.ratio for r in runs),
            mean(hosts) if (hosts := [r.host_ms for r in runs if r.host_ms]) else None,
            mean(los) if (los := [r.loopback_ms for r in runs if r.loopback_ms]) else None))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("groups", nargs="+", metavar="NAME=GLOB[,GLOB...]")
    args = ap.parse_args()
    groups: dict[str, list[Run]] = {}
    for spec in args.groups:
        name, _, patterns = spec.partition("=")
        paths = sorted(p for pattern in patterns.split(",") for p in glob.glob(pattern))
        if not name or not paths:
            ap.error(f"{spec!r}: expected NAME=GLOB matching at least one run's JSON")
        groups[name] = [read(p) for p in paths]
    print("\n".join(report(groups)))


if __name__ == "__main__":
    main()
