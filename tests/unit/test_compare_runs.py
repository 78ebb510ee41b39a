"""benchmarks.compare_runs reads runs of every vintage: the loopback yardstick's column
is there for runs that sampled it and a dash for older ones."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import compare_runs


def _run(path: Path, label: str, loopback: float | None) -> str:
    procs = {p: {"cpu_ms_per_delivery": 0.1} for p in compare_runs.PIPELINE}
    procs |= {"receiver0": {"cpu_ms_per_delivery": 0.02},
              "receiver1": {"cpu_ms_per_delivery": 0.04}}
    d = {"label": label, "measure": {"healthy_delivered_per_s_during_load": 4000.0},
         "machine_busy_pct": 88.0, "processes": procs,
         "latency_budget": {"p50_p99_ms": {"commit→arrival": [200.0, 900.0]}},
         "host_speed_ms_per_unit": {"during_load": {"p50": 17.5}}}
    if loopback is not None:
        d["host_loopback_ms_per_unit"] = {"during_load": {"p50": loopback}}
    path.write_text(json.dumps(d))
    return str(path)


def test_a_run_with_the_loopback_yardstick_shows_it_and_an_older_one_a_dash(tmp_path):
    new = compare_runs.read(_run(tmp_path / "new.json", "new-1", 12.5))
    old = compare_runs.read(_run(tmp_path / "old.json", "old-1", None))
    assert (new.loopback_ms, old.loopback_ms) == (12.5, None)
    assert new.receiver_ms == 0.03 and round(new.ratio, 6) == round(0.5 / 0.03, 6)
    lines = compare_runs.report({"a": [new, old]})
    assert lines[0].split()[-2:] == ["host", "lo"]
    assert lines[1].split()[-2:] == ["17.5", "12.5"]
    assert lines[2].split()[-2:] == ["17.5", "-"]
    assert lines[3].split()[-2:] == ["17.5", "12.5"]  # the mean of the runs that have it


def test_every_replica_of_a_service_counts(tmp_path):
    # --replicas 2: relay2, fanout2, dispatcher2 beside the first ones
    path = tmp_path / "r2.json"
    _run(path, "r2-1", None)
    d = json.loads(path.read_text())
    for name in ("relay", "fanout", "dispatcher"):
        d["processes"][f"{name}2"] = {"cpu_ms_per_delivery": 0.05}
    path.write_text(json.dumps(d))
    run = compare_runs.read(str(path))
    assert round(run.cpu_ms["dispatcher"], 6) == 0.15 and run.cpu_ms["kafka"] == 0.1
    assert round(run.pipeline_ms, 6) == 0.65
