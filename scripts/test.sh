#!/usr/bin/env bash
# The whole suite on the real stack: lint, then every test, in two lanes.
#
#   outage lane  the tests marked `outage` stop or freeze Kafka or PostgreSQL, so they
#                run one after another on a stack of their own (folder .stack-outage,
#                ports 28092/28093 and 56432), booted during lint and left running like
#                the main one, after the main lane and beside its solo tests;
#   main lane    every other test, on HOOKSTREAM_TEST_WORKERS pytest-xdist workers
#                (default 4) against the stack that `make stack-up` started: each test
#                has its own database, cloned from a migrated template, and its own
#                topic prefix and consumer groups; then the tests marked `solo` (they
#                hold the pipeline to a latency at the host's capacity) one at a time,
#                beside the outage lane.
#
# The main lane hands out whole modules (module fixtures are set up once), longest tiers
# first (tests/conftest.py), so the minutes-long fault tests start at once.
# Arguments, when given, are passed to one plain pytest run on the main stack instead
# (`scripts/test.sh tests/unit -x`).
# pytest exits 5 when it collected no test; that is a failure here like any other code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -gt 0 ]; then
  scripts/lint.sh
  exec .venv/bin/pytest -p no:cacheprovider "$@"
fi

logs="$(mktemp -d "${TMPDIR:-/tmp}/hookstream-test.XXXXXX")"
# The environment must not point the outage lane at the main stack's servers.
unset HOOKSTREAM_DATABASE_URL HOOKSTREAM_KAFKA_BOOTSTRAP
outage_env=(HOOKSTREAM_STACK_DIR="$PWD/.stack-outage" HOOKSTREAM_STACK_KAFKA_PORT=28092
  HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT=28093 HOOKSTREAM_STACK_PG_PORT=56432)
# The outage lane's stack boots while the lint step runs.
env "${outage_env[@]}" .venv/bin/hookstream stack up >"$logs/outage-stack.log" 2>&1 &
stack_pid=$!
# So does the Kubernetes manifests' offline validator (a Go build and two schema
# conversions, once per machine; nothing after that).
scripts/k8s_tools.sh >"$logs/k8s-tools.log" 2>&1 &
k8s_pid=$!
scripts/lint.sh
wait "$stack_pid" || { cat "$logs/outage-stack.log" >&2; exit 1; }
wait "$k8s_pid" || { cat "$logs/k8s-tools.log" >&2; exit 1; }

started=$SECONDS
# Two phases. First the main lane on parallel workers. Then, side by side, its `solo`
# tests (on the main stack) and the outage lane (on its own stack): two pipelines at a
# time, never five. Run beside the whole main lane (this script did so for a day), the
# outage tests failed one run in four: a Kafka restarted under that load left the
# services' consumers without a group coordinator for minutes (test_kafka_outage), a
# failure for issue #47. Beside the solo tests only, one run in three lost retries
# produced during a Kafka outage (test_faults_dispatcher_under_load): tasks that reached
# the dispatcher before their attempt's outcome was written, dropped as stale — fixed
# (the dispatcher's ``early`` tasks), so the phases run side by side again.
set +e
.venv/bin/pytest -p no:cacheprovider --dist loadscope --no-loadscope-reorder \
  -m "not outage and not solo" -n "${HOOKSTREAM_TEST_WORKERS:-4}" \
  --junitxml="$logs/main.xml" 2>&1 | tee "$logs/main.log"
main_rc=${PIPESTATUS[0]}
echo "main lane: exit $main_rc after $((SECONDS - started)) s; now its solo tests beside the outage lane"
# The solo tests' output goes to their log, shown whole when they end (not interleaved).
.venv/bin/pytest -p no:cacheprovider -m "solo and not outage" --junitxml="$logs/solo.xml" \
  >"$logs/solo.log" 2>&1 &
solo_pid=$!
env "${outage_env[@]}" .venv/bin/pytest -p no:cacheprovider -m outage \
  --junitxml="$logs/outage.xml" 2>&1 | tee "$logs/outage.log"
outage_rc=${PIPESTATUS[0]}
echo "outage lane: exit $outage_rc after $((SECONDS - started)) s"
wait "$solo_pid"
solo_rc=$?
cat "$logs/solo.log"
set -e
echo "solo tests: exit $solo_rc after $((SECONDS - started)) s"
# One closing line for both lanes, counted from their JUnit reports.
.venv/bin/python scripts/junit_totals.py "$logs/main.xml" "$logs/solo.xml" "$logs/outage.xml"
[ "$main_rc" -eq 0 ] && [ "$solo_rc" -eq 0 ] && [ "$outage_rc" -eq 0 ]
