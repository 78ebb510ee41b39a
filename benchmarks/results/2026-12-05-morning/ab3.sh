source /tmp/privenv.sh
new() { cd /work/main && timeout 400 .venv/bin/python -m benchmarks.pipeline "$@"; }
old() { cd /tmp/old && env -u HOOKSTREAM_SECRET_KEYS timeout 400 .venv/bin/python -m benchmarks.pipeline "$@"; }
new --rate 250 --endpoints-per-event 4 --duration 60 --no-bad --label m2-lat-ys-1 > /tmp/m2-lat-ys-1.txt 2>&1
new --rate 250 --endpoints-per-event 4 --duration 60 --no-yardsticks --label m2-bad-1 > /tmp/m2-bad-1.txt 2>&1
new --rate 250 --endpoints-per-event 4 --duration 60 --no-bad --label m2-lat-ys-2 > /tmp/m2-lat-ys-2.txt 2>&1
for s in old-1 new-1 new-2 old-2 old-3 new-3; do
  v=${s%-*}
  $v --rate 1000 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks --label m2-sat-$s > /tmp/m2-sat-$s.txt 2>&1
done
new --rate 250 --endpoints-per-event 4 --duration 60 --no-yardsticks --label m2-bad-2 > /tmp/m2-bad-2.txt 2>&1
echo done > /tmp/ab3.done
