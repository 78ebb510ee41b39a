. /tmp/privenv.sh
run() { side=$1; label=$2; shift 2; case $side in new) dir=/work/main;; base) dir=/tmp/base;; esac
  (cd $dir && timeout 900 .venv/bin/python -m benchmarks.pipeline "$@" --label $label > /tmp/exp/og/$label.out 2>&1); echo "$label rc $? $(date +%T)" >> /tmp/exp/og/log; }
LAT="--rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks --pg-statements"
run base og-base-1 $LAT; run new og-new-1 $LAT
run new og-new-2 $LAT; run base og-base-2 $LAT
run base og-base-3 $LAT; run new og-new-3 $LAT
echo done >> /tmp/exp/og/log
