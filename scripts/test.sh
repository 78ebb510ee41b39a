#!/usr/bin/env bash
# The whole suite on the real stack: lint, unit, integration, end to end.
# Assumes `make stack-up` (the Makefile's `test` target does it). pytest exits 5 when
# it collected no test; that is a failure here like any other non-zero code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
.venv/bin/ruff check src services tests benchmarks
# The benchmark's receiver farm in Go: formatted and vetted like the Python.
(cd benchmarks/receiver_farm_go && unformatted="$(gofmt -l .)" &&
  { [ -z "$unformatted" ] || { echo "gofmt: $unformatted" >&2; exit 1; }; } &&
  GOTOOLCHAIN=local go vet .)
# Types of the shipped code (tests and benchmarks are checked by ruff only).
.venv/bin/mypy src services
.venv/bin/pytest -p no:cacheprovider "$@"
