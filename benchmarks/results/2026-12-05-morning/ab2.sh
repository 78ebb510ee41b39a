cd /work/main && source /tmp/privenv.sh
for i in 1 2 3; do
  for v in new base; do
    if [ $v = base ]; then c=0; else c=0.5; fi
    HOOKSTREAM_FANOUT_COMMIT_INTERVAL_S=$c timeout 300 .venv/bin/python -m benchmarks.pipeline --rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks --label ci-lat-$v-$i > /tmp/ci-lat-$v-$i.txt 2>&1
  done
done
for i in 1 2; do
  for v in base new; do
    if [ $v = base ]; then c=0; else c=0.5; fi
    HOOKSTREAM_FANOUT_COMMIT_INTERVAL_S=$c timeout 300 .venv/bin/python -m benchmarks.pipeline --rate 1000 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks --label ci-sat-$v-$i > /tmp/ci-sat-$v-$i.txt 2>&1
  done
done
echo done > /tmp/ab2.done
