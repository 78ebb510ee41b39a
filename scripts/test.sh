#!/usr/bin/env bash
# The whole suite on the real stack: lint, then every test, in two lanes at once.
#
#   outage lane  the tests marked `outage` stop or freeze Kafka or PostgreSQL, so they run
#                one after another on a stack of their own (folder .stack-outage, ports
#                28092/28093 and 56432), started here and left running like the main one;
#   main lane    every other test, on pytest-xdist workers against the stack that
#                `make stack-up` started (each test has its own database, cloned from a
#                migrated template, and its own topic prefix and consumer groups).
#
# Arguments, when given, are passed to one plain pytest run on the main stack instead
# (`scripts/test.sh tests/unit -x`). HOOKSTREAM_TEST_WORKERS sets the main lane's workers.
# pytest exits 5 when it collected no test; that is a failure here like any other code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -gt 0 ]; then
  scripts/lint.sh
  exec .venv/bin/pytest -p no:cacheprovider "$@"
fi

logs="$(mktemp -d "${TMPDIR:-/tmp}/hookstream-test.XXXXXX")"
outage_env=(HOOKSTREAM_STACK_DIR="$PWD/.stack-outage" HOOKSTREAM_STACK_KAFKA_PORT=28092
  HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT=28093 HOOKSTREAM_STACK_PG_PORT=56432)
# The environment must not point the outage lane at the main stack's servers.
unset HOOKSTREAM_DATABASE_URL HOOKSTREAM_KAFKA_BOOTSTRAP
# The outage lane's stack boots while the lint step runs.
env "${outage_env[@]}" .venv/bin/hookstream stack up >"$logs/outage-stack.log" 2>&1 &
stack_pid=$!
scripts/lint.sh
wait "$stack_pid" || { cat "$logs/outage-stack.log" >&2; exit 1; }

started=$SECONDS
env "${outage_env[@]}" .venv/bin/pytest -p no:cacheprovider -m outage \
  --junitxml="$logs/outage.xml" >"$logs/outage.log" 2>&1 &
outage_pid=$!
# The main lane prints as it goes; the outage lane's output follows it.
set +e
.venv/bin/pytest -p no:cacheprovider -m "not outage" -n "${HOOKSTREAM_TEST_WORKERS:-4}" \
  --dist loadscope --junitxml="$logs/main.xml" 2>&1 | tee "$logs/main.log"
main_rc=${PIPESTATUS[0]}
echo "main lane: exit $main_rc after $((SECONDS - started)) s; waiting for the outage lane"
wait "$outage_pid"
outage_rc=$?
set -e
echo "---------------------------------------------------------------- outage lane"
cat "$logs/outage.log"
echo "outage lane: exit $outage_rc after $((SECONDS - started)) s"
# One closing line for both lanes, counted from their JUnit reports.
.venv/bin/python scripts/junit_totals.py "$logs/main.xml" "$logs/outage.xml"
[ "$main_rc" -eq 0 ] && [ "$outage_rc" -eq 0 ]
