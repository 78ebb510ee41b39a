cd /work/main && . /tmp/privenv.sh
for run in "$@"; do
  l=${run#l}; l=${l%%-*}
  HSX_LINGER_MS=$l timeout 900 .venv/bin/python -m benchmarks.pipeline --rate 1000 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks --label sat-$run > /tmp/exp/sat-$run.out 2>&1
done
echo done > /tmp/exp/sat.done
