set -u
cd /work/main
export HOOKSTREAM_STACK_DIR=/tmp/hs-stack-chaos HOOKSTREAM_STACK_KAFKA_PORT=29192 \
  HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT=29193 HOOKSTREAM_STACK_PG_PORT=25434 \
  HOOKSTREAM_DATABASE_URL=postgresql://hookstream@127.0.0.1:25434/hookstream \
  HOOKSTREAM_KAFKA_BOOTSTRAP=127.0.0.1:29192
eval "$(.venv/bin/python -m hookstream.dev.localstack env 2>/dev/null | grep SECRET_KEYS)"
PSQL="psql -h 127.0.0.1 -p 25434 -U hookstream -d postgres -X -q"
for run in "$@"; do
  $PSQL -c "SELECT pg_stat_statements_reset()" >/dev/null
  case $run in
    anysql*) git show 4a983e8:src/hookstream/io/sql/dispatcher.sql > src/hookstream/io/sql/dispatcher.sql
             git show 4a983e8:src/hookstream/io/sql/sweeper.sql > src/hookstream/io/sql/sweeper.sql;;
    *) git checkout -q src/hookstream/io/sql/;;
  esac
  .venv/bin/python -m benchmarks.pipeline --rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks --label $run > /tmp/exp/range/$run.log 2>&1
  git checkout -q src/hookstream/io/sql/
  $PSQL -c "\copy (SELECT calls, round(total_exec_time::numeric,0) ms, round(total_plan_time::numeric,0) plan_ms, round(mean_exec_time::numeric,3) mean, round(mean_plan_time::numeric,3) mean_plan, rows, shared_blks_hit hit, left(regexp_replace(query, '\s+', ' ', 'g'), 100) q FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 15) TO '/tmp/exp/range/$run.tsv'"
  echo "$run $(grep -E 'budget commit→arrival|machine busy|stage claim round' /tmp/exp/range/$run.log | tr -s ' ' | tr '\n' ';')"
done
