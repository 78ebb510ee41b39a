. /tmp/privenv.sh
run() { side=$1; label=$2; shift 2; case $side in new) dir=/work/main; ex="";; old) dir=/tmp/old; ex="-u HOOKSTREAM_SECRET_KEYS";; esac
  (cd $dir && timeout 900 env $ex .venv/bin/python -m benchmarks.pipeline "$@" --label $label > /tmp/exp/s2/$label.out 2>&1); echo "$label rc $?" >> /tmp/exp/s2/log; }
IDLE="--rate 1 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks"
run old i-old-1 $IDLE; run new i-new-1 $IDLE
run new i-new-2 $IDLE; run old i-old-2 $IDLE
echo idle-done >> /tmp/exp/s2/log
