"""The medians BENCHMARKS.md quotes for issue #19, recomputed from the raw files beside
this script (median, then min-max, then how many values):

    .venv/bin/python benchmarks/results/2026-12-01-honesty/medians.py
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _load(pattern: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(HERE.glob(pattern))]


def _show(label: str, values: list[float]) -> None:
    if values:
        print(f"  {label}: {statistics.median(values):,.3f}"
              f" ({min(values):,.3f}-{max(values):,.3f}, {len(values)})")


def dispatcher(pattern: str) -> None:
    runs = _load(pattern)
    print(f"{pattern}: {len(runs)} runs")
    _show("yardstick req/s", [d["yardstick_req_per_s"] for d in runs])
    _show("yardstick CPU-ms/request",
          [d["yardstick_cpu_ms_per_request"] for d in runs if "yardstick_cpu_ms_per_request" in d])
    for procs in (1, 2):
        pairs = [(r, d) for d in runs for r in d["runs"] if r["processes"] == procs]
        _show(f"{procs}p attempts/s", [r["attempts_per_s"] for r, _ in pairs])
        _show(f"{procs}p vs yardstick",
              [r["attempts_per_s"] / d["yardstick_req_per_s"] for r, d in pairs])
        for key in ("cpu_ms_per_attempt", "http_window_attempts_per_s",
                    "cpu_ms_per_attempt_lifetime", "mean_in_flight_per_process"):
            _show(f"{procs}p {key}", [r[key] for r, _ in pairs if key in r])
        roles = sorted({k for r, _ in pairs for k in r["machine_cpu_ms_per_attempt"]})
        for role in roles:
            _show(f"{procs}p CPU-ms/attempt {role}",
                  [r["machine_cpu_ms_per_attempt"].get(role, 0.0) for r, _ in pairs])


def relay(pattern: str) -> None:
    runs = _load(pattern)
    print(f"{pattern}: {len(runs)} runs")
    _show("yardstick records/s (faster of 2)",
          [d["yardstick_records_per_s"] for d in runs if "yardstick_records_per_s" in d])
    _show("yardstick records/s (every run of it)",
          [y["records_per_s"] for d in runs for y in d.get("yardstick", [])])
    best = [(r, d) for d in runs for r in d["best_case"]]
    _show("best case relay events/s", [r["relay_rate"] for r, _ in best])
    _show("best case / yardstick", [r["relay_rate"] / d["yardstick_records_per_s"]
                                    for r, d in best if "yardstick_records_per_s" in d])
    _show("best case relay CPU-ms/event", [r["relay_cpu_ms_per_event"] for r, _ in best])
    for k in (1, 4):
        _show(f"fanout {k} ep/event deliveries/s",
              [r["fanout_rate"] for r, _ in best if r["endpoints_per_event"] == k])
    for per_txn in (1, 50):
        small = [(r, d) for d in runs for r in d["small_transactions"]
                 if r["events_per_transaction"] == per_txn]
        if not small:
            continue
        print(f"  -- {per_txn} event(s) per transaction; kept up:"
              f" {[r['kept_up'] for r, _ in small]}")
        for key in ("producer_events_per_s", "producer_transactions_per_s",
                    "relay_events_per_s", "backlog_at_end", "machine_busy"):
            _show(key, [r[key] for r, _ in small])
        _show("relay / yardstick", [r["relay_events_per_s"] / d["yardstick_records_per_s"]
                                    for r, d in small])
        for q in ("p50_ms", "p95_ms", "p99_ms", "max_ms"):
            _show(f"commit->ack {q}", [r["commit_to_ack"][q] for r, _ in small])
        for role in ("relay", "postgres", "kafka", "producers", "others"):
            _show(f"CPU-ms/event {role}", [r["cpu_ms_per_event"].get(role, 0.0) for r, _ in small])


def old_relay(pattern: str) -> None:
    """The old script printed a table only: its rows, parsed."""
    rates: dict[int, list[float]] = {1: [], 4: []}
    fanout: dict[int, list[float]] = {1: [], 4: []}
    files = sorted(HERE.glob(pattern))
    for path in files:
        for line in path.read_text().splitlines():
            m = re.match(r"\s+\d+\s+(\d+)\s+[\d.]+\s+([\d,]+)\s+[\d.]+\s+([\d,]+)", line)
            if m:
                rates[int(m[1])].append(float(m[2].replace(",", "")))
                fanout[int(m[1])].append(float(m[3].replace(",", "")))
    print(f"{pattern}: {len(files)} runs")
    _show("best case relay events/s", rates[1] + rates[4])
    for k in (1, 4):
        _show(f"fanout {k} ep/event deliveries/s", fanout[k])


if __name__ == "__main__":
    dispatcher("dispatcher-oldscript-*.json")
    dispatcher("dispatcher-c512-*.json")
    dispatcher("dispatcher-c256-*.json")
    # the figures quoted (the committed script), and the old script alternated with them
    relay("relay-fanout-[0-9].json")
    old_relay("relay-fanout-oldscript-[0-9].txt")
    # earlier batches, the yardstick still before the best case (see README.md)
    relay("relay-fanout-nosync-*.json")
    old_relay("relay-fanout-oldscript-a*.txt")
    relay("relay-fanout-ysbefore-*.json")
    old_relay("relay-fanout-oldscript-b*.txt")
    relay("relay-fanout-bestonly-*.json")
    old_relay("relay-fanout-oldscript-c*.txt")
    relay("relay-yardstick-effect-with-*.json")
    relay("relay-yardstick-effect-without-*.json")
