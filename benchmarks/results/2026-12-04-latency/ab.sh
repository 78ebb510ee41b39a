. /tmp/privenv.sh
run() { side=$1; label=$2; shift 2; case $side in new) dir=/work/main;; base) dir=/tmp/base;; old) dir=/tmp/old;; esac
  (cd $dir && timeout 900 .venv/bin/python -m benchmarks.pipeline "$@" --label $label > /tmp/exp/$label.out 2>&1); }
LAT="--rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks"
SAT="--rate 1000 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks"
run base ab-lat-base-1 $LAT; run new ab-lat-new-1 $LAT
run new ab-lat-new-2 $LAT; run base ab-lat-base-2 $LAT
run base ab-lat-base-3 $LAT; run new ab-lat-new-3 $LAT
run base ab-sat-base-1 $SAT; run new ab-sat-new-1 $SAT
run new ab-sat-new-2 $SAT; run base ab-sat-base-2 $SAT
run new ab-lat-new-ys --rate 250 --endpoints-per-event 4 --duration 60 --no-bad
run new ab-bad-new-1 --rate 250 --endpoints-per-event 4 --duration 60 --no-yardsticks
run base ab-bad-base-1 --rate 250 --endpoints-per-event 4 --duration 60 --no-yardsticks
echo done > /tmp/exp/ab.done
