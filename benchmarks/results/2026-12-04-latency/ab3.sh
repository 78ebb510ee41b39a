. /tmp/privenv.sh
run() { side=$1; label=$2; shift 2; case $side in new) dir=/work/main;; base) dir=/tmp/base;; esac
  (cd $dir && timeout 900 .venv/bin/python -m benchmarks.pipeline "$@" --label $label > /tmp/exp/$label.out 2>&1); }
LAT="--rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks"
run base ab-lat-base-6 $LAT; run new ab-lat-new-6 $LAT
run new ab-lat-new-7 $LAT; run base ab-lat-base-7 $LAT
echo done > /tmp/exp/ab3.done
