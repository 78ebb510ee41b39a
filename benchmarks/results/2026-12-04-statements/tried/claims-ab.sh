cd /work/main && . /tmp/privenv.sh
mkdir -p /tmp/exp/cab
for run in "$@"; do
  v=${run%-*}
  case $v in
    one) e="HSX_PUMP_CLAIMS=1";;
    two) e="HSX_PUMP_CLAIMS=2";;
  esac
  env $e timeout 900 .venv/bin/python -m benchmarks.pipeline --rate 1000 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks --label c-$run > /tmp/exp/cab/$run.out 2>&1
  echo "$run $(grep 'healthy delivered/s during' /tmp/exp/cab/$run.out) $(grep 'claim round trip' /tmp/exp/cab/$run.out) $(grep 'machine busy' /tmp/exp/cab/$run.out) $(grep '^postgres:' /tmp/exp/cab/$run.out) $(grep '^dispatcher:' /tmp/exp/cab/$run.out)" >> /tmp/exp/cab/summary.txt
done
echo done >> /tmp/exp/cab/summary.txt
