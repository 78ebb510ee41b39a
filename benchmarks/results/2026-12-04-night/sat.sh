. /tmp/privenv.sh
run() { side=$1; label=$2; shift 2; case $side in new) dir=/work/main; ex="";; old) dir=/tmp/old; ex="-u HOOKSTREAM_SECRET_KEYS";; esac
  (cd $dir && timeout 900 env $ex .venv/bin/python -m benchmarks.pipeline "$@" --label $label > /tmp/exp/s2/$label.out 2>&1); echo "$label rc $?" >> /tmp/exp/s2/log; }
SAT="--rate 1000 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks"
run old s-old-1 $SAT; run new s-new-1 $SAT
run new s-new-2 $SAT; run old s-old-2 $SAT
run old s-old-3 $SAT; run new s-new-3 $SAT
echo done >> /tmp/exp/s2/log
