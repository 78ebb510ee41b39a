source /tmp/privenv.sh
new() { cd /work/main && timeout 400 .venv/bin/python -m benchmarks.pipeline "$@"; }
old() { cd /tmp/old && env -u HOOKSTREAM_SECRET_KEYS timeout 400 .venv/bin/python -m benchmarks.pipeline "$@"; }
while [ ! -f /tmp/ab3.done ]; do sleep 5; done
for s in new-1 old-1 old-2 new-2; do
  v=${s%-*}
  $v --rate 1250 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks --label m2-sat5k-$s > /tmp/m2-sat5k-$s.txt 2>&1
done
echo done > /tmp/ab3b.done
