"""PartitionOffsets (hookstream.core.offsets) cost per message: track, then complete in a
given order, over a partition of N offsets; committable() read after every completion,
as the dispatcher's committer would.

    .venv/bin/python -m benchmarks.offsets [--offsets 200000] [--repeat 3]

Orders: in order; reverse (the head finishes last: every completion but the last
leaves the commit where it is); random; a slow head (offset 0 finishes last, the rest
in order: the compaction path). Prints µs per message (best of --repeat) and writes
bench-results/offsets.json. A scan per operation would be quadratic: the reverse order
at 200,000 offsets would take minutes instead of a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable

from benchmarks.common import RESULTS
from hookstream.core.offsets import PartitionOffsets

ORDERS: dict[str, Callable[[int], list[int]]] = {
    "in order": lambda n: list(range(n)),
    "reverse": lambda n: list(range(n - 1, -1, -1)),
    "random": lambda n: random.Random(1).sample(range(n), n),
    "slow head": lambda n: [*range(1, n), 0],
}


def run(order: list[int]) -> float:
    """Seconds to track len(order) offsets and complete them in ``order``."""
    started = time.perf_counter()
    book = PartitionOffsets()
    for offset in range(len(order)):
        book.track(offset)
    for offset in order:
        book.complete(offset)
        book.committable()
    elapsed = time.perf_counter() - started
    assert book.committable() == len(order) and book.pending_count() == 0
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--offsets", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    out = {}
    print(f"{'order':>10} {'µs/message':>11} {'total s':>8}  ({args.offsets:,} offsets)")
    for name, make in ORDERS.items():
        order = make(args.offsets)
        best = min(run(order) for _ in range(args.repeat))
        out[name] = {"offsets": args.offsets, "seconds": round(best, 4),
                     "us_per_message": round(best / args.offsets * 1e6, 3)}
        print(f"{name:>10} {out[name]['us_per_message']:>11} {best:>8.3f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "offsets.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
