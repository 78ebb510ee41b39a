source /tmp/privenv.sh
cd /work/main
for s in l5-1 l0-1 l0-2 l5-2; do
  if [ ${s%-*} = l5 ]; then L=5; else L=0; fi
  EXP_LINGER_MS=$L timeout 400 .venv/bin/python -m benchmarks.pipeline --rate 1250 --endpoints-per-event 4 --duration 40 --no-bad --no-yardsticks --label m2-5k-$s > /tmp/m2-5k-$s.txt 2>&1
done
echo done > /tmp/ab4.done
