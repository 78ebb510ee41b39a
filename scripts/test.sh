#!/usr/bin/env bash
# The whole suite on the real stack: lint, then every test, in two lanes.
#
#   outage lane  the tests marked `outage` stop or freeze Kafka or PostgreSQL, so they
#                run one after another on a stack of their own (folder .stack-outage,
#                ports 28092/28093 and 56432), booted during lint and left running like
#                the main one, after the main lane and its solo tests;
#   main lane    every other test, on HOOKSTREAM_TEST_WORKERS pytest-xdist workers
#                (default 4) against the stack that `make stack-up` started: each test
#                has its own database, cloned from a migrated template, and its own
#                topic prefix and consumer groups; then the tests marked `solo` (they
#                hold the pipeline to a latency at the host's capacity) one at a time.
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
# Three phases, one after another: the main lane on parallel workers, then its `solo`
# tests, then the outage lane. Beside other tests (the whole main lane, or even just the
# solo tests) the outage tests failed about one run in three or four, each time on a
# real bug that CPU contention brings out, for issue #47: a Kafka restarted under load
# left consumers without a group coordinator for minutes; retry records that hit the
# producer's message timeout during the outage and were produced again were lost (4 of
# 4, test_faults_dispatcher_under_load). Until those are fixed the phases stay apart.
set +e
.venv/bin/pytest -p no:cacheprovider --dist loadscope --no-loadscope-reorder \
  -m "not outage and not solo" -n "${HOOKSTREAM_TEST_WORKERS:-4}" \
  --junitxml="$logs/main.xml" 2>&1 | tee "$logs/main.log"
main_rc=${PIPESTATUS[0]}
echo "main lane: exit $main_rc after $((SECONDS - started)) s; now its solo tests"
.venv/bin/pytest -p no:cacheprovider -m "solo and not outage" --junitxml="$logs/solo.xml" \
  2>&1 | tee "$logs/solo.log"
solo_rc=${PIPESTATUS[0]}
echo "solo tests: exit $solo_rc after $((SECONDS - started)) s; now the outage lane"
env "${outage_env[@]}" .venv/bin/pytest -p no:cacheprovider -m outage \
  --junitxml="$logs/outage.xml" 2>&1 | tee "$logs/outage.log"
outage_rc=${PIPESTATUS[0]}
set -e
echo "outage lane: exit $outage_rc after $((SECONDS - started)) s"
# One closing line for both lanes, counted from their JUnit reports.
.venv/bin/python scripts/junit_totals.py "$logs/main.xml" "$logs/solo.xml" "$logs/outage.xml"
[ "$main_rc" -eq 0 ] && [ "$solo_rc" -eq 0 ] && [ "$outage_rc" -eq 0 ]
