cd /work/main && source /tmp/privenv.sh
for i in 1 2 3; do
  for v in base exp; do
    if [ $v = base ]; then c=0; else c=0.5; fi
    if [ $i = 2 ]; then :; fi
    EXP_FANOUT_COMMIT_S=$c timeout 300 .venv/bin/python -m benchmarks.pipeline --rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks --label fc-$v-$i > /tmp/fc-$v-$i.txt 2>&1
  done
done
echo done > /tmp/ab1.done
