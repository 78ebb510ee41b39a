#!/usr/bin/env python3
"""One closing line for the suite's lanes: ``N passed, N failed, N skipped`` summed over
the JUnit XML reports given (a missing or unreadable report counts as one failure, so a
lane that crashed before writing it never reads as green)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def totals(paths: list[str]) -> tuple[int, int, int]:
    passed = failed = skipped = 0
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            failed += 1
            continue
        for suite in root.iter("testsuite"):
            tests = int(suite.get("tests", 0))
            bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skip = int(suite.get("skipped", 0))
            failed += bad
            skipped += skip
            passed += tests - bad - skip
    return passed, failed, skipped


def main(argv: list[str]) -> int:
    passed, failed, skipped = totals(argv)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
