"""Summarise py-spy's collapsed stacks: where the sampled time goes, by own and total time.

    .venv/bin/python benchmarks/profile_summary.py bench-results/dispatcher-profile-1.txt
"""

from __future__ import annotations

import sys
from collections import Counter


def main(path: str, top: int = 25) -> None:
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    with open(path) as src:
        lines = src.readlines()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack:
            continue
        n = int(count)
        samples += n
        frames = [f.split(" (")[0] + " " + f.split("/")[-1].rstrip(")") for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    print(f"{samples} samples\n-- own time")
    for f, n in own.most_common(top):
        print(f"{n / samples:6.1%}  {f}")
    print("-- total time (project frames)")
    for f, n in total.most_common(200):
        if "hookstream" in f or "dispatcher" in f or "service.py" in f:
            print(f"{n / samples:6.1%}  {f}")


if __name__ == "__main__":
    main(sys.argv[1])
