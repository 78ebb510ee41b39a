cd /work/main && . /tmp/privenv.sh
mkdir -p /tmp/exp/gab
timeout 600 .venv/bin/python -m benchmarks.pipeline --rate 1000 --endpoints-per-event 4 --duration 20 --no-bad --no-yardsticks --label warm > /tmp/exp/gab/warm.out 2>&1
for run in "$@"; do
  v=${run%-*}
  case $v in
    base) e="";;
    gap) e="HSX_DISPATCH_GAP_S=0.0003";;
    gather) e="HSX_DISPATCH_GATHER_S=0.001";;
  esac
  env $e timeout 900 .venv/bin/python -m benchmarks.pipeline --rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks --label g-$run > /tmp/exp/gab/$run.out 2>&1
  echo "$run $(grep 'commit→arrival p50' /tmp/exp/gab/$run.out) $(grep 'claims: per' /tmp/exp/gab/$run.out) $(grep 'machine busy' /tmp/exp/gab/$run.out)" >> /tmp/exp/gab/summary.txt
done
echo done >> /tmp/exp/gab/summary.txt
