. /tmp/privenv.sh
run() { side=$1; label=$2; shift 2; case $side in new) dir=/work/main;; base) dir=/tmp/base;; esac
  (cd $dir && timeout 900 .venv/bin/python -m benchmarks.pipeline "$@" --label $label > /tmp/exp/$label.out 2>&1); }
LAT="--rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks"
run new ab-lat-new-4 $LAT; run base ab-lat-base-4 $LAT
run base ab-lat-base-5 $LAT; run new ab-lat-new-5 $LAT
run new ab-prof-new --rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks --profile 20
echo done > /tmp/exp/ab2.done
