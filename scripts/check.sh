#!/usr/bin/env bash
# `make check`, the development loop: lint and types, then the unit tests and the
# integration tests that need no outage, on parallel workers. The Kubernetes manifests'
# validator is installed beside the lint step (once per machine; nothing after that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log="$(mktemp "${TMPDIR:-/tmp}/hookstream-k8s-tools.XXXXXX")"
scripts/k8s_tools.sh >"$log" 2>&1 &
k8s_pid=$!
scripts/lint.sh
wait "$k8s_pid" || { cat "$log" >&2; exit 1; }
exec .venv/bin/pytest -p no:cacheprovider -q -m "not outage" \
  -n "${HOOKSTREAM_TEST_WORKERS:-4}" --dist loadscope --no-loadscope-reorder \
  tests/unit tests/integration
