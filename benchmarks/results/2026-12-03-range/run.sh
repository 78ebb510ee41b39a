set -u
# LABEL: the runs' label prefix (sat4, sat5, ...); OUT: where logs and statement dumps go
LABEL=${LABEL:-sat}
OUT=${OUT:-/tmp/exp/range}
mkdir -p "$OUT"
export HOOKSTREAM_STACK_DIR=/tmp/hs-stack-chaos HOOKSTREAM_STACK_KAFKA_PORT=29192 \
  HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT=29193 HOOKSTREAM_STACK_PG_PORT=25434 \
  HOOKSTREAM_DATABASE_URL=postgresql://hookstream@127.0.0.1:25434/hookstream \
  HOOKSTREAM_KAFKA_BOOTSTRAP=127.0.0.1:29192
PSQL="psql -h 127.0.0.1 -p 25434 -U hookstream -d postgres -X -q"
$PSQL -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
for run in "$@"; do
  echo "$run start $(date +%T)"
  side=${run%-*}
  if [ "$side" = old ]; then dir=/tmp/old15; keys=""; else dir=/work/main; keys="$(cd /work/main && .venv/bin/python -m hookstream.dev.localstack env 2>/dev/null | grep SECRET_KEYS | sed 's/^export //')"; fi
  $PSQL -c "SELECT pg_stat_statements_reset()" >/dev/null
  (cd $dir && env -u HOOKSTREAM_SECRET_KEYS $keys .venv/bin/python -m benchmarks.pipeline --rate 1000 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks --label $LABEL-$run > $OUT/$run.log 2>&1)
  $PSQL -c "\copy (SELECT calls, round(total_exec_time::numeric,0) ms, round(mean_exec_time::numeric,3) mean, rows, shared_blks_hit hit, shared_blks_read rd, left(regexp_replace(query, '\s+', ' ', 'g'), 160) q FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 25) TO '$OUT/$run.tsv'"
  echo "$run $(grep 'healthy delivered/s during load' $OUT/$run.log) $(grep 'machine busy' $OUT/$run.log)"
done
