#!/usr/bin/env bash
# The lint step of `make check` and `make test`: ruff; in the shipped code no import circle
# and no SQL outside a store; the Go receiver farm formatted and vetted; the shipped code's
# types (tests and benchmarks are checked by ruff only).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
.venv/bin/ruff check src services tests benchmarks scripts
.venv/bin/python scripts/check_imports.py
.venv/bin/python scripts/check_sql.py
(cd benchmarks/receiver_farm_go && unformatted="$(gofmt -l .)" &&
  { [ -z "$unformatted" ] || { echo "gofmt: $unformatted" >&2; exit 1; }; } &&
  GOTOOLCHAIN=local go vet .)
.venv/bin/mypy src services
