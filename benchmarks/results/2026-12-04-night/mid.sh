. /tmp/privenv.sh
run() { side=$1; label=$2; shift 2; case $side in new) dir=/work/main; ex="";; old) dir=/tmp/old; ex="-u HOOKSTREAM_SECRET_KEYS";; mid) dir=/tmp/mid; ex="";; esac
  (cd $dir && timeout 900 env $ex .venv/bin/python -m benchmarks.pipeline "$@" --label $label > /tmp/exp/s2/$label.out 2>&1); echo "$label rc $?" >> /tmp/exp/s2/log; }
SAT="--rate 1000 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks"
run mid s-mid-1 $SAT; run old s-old-4 $SAT; run new s-new-4 $SAT
run mid s-mid-2 $SAT
echo mid-done >> /tmp/exp/s2/log
