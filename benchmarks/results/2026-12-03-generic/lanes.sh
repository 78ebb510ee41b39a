cd /work/main && . /tmp/privenv.sh && export HOOKSTREAM_SECRET_KEYS=dev1:rgnzaV50Hakm98VufHcRdmGEbqxPcloPk3aQcqvvST4=
for run in l3-1 l2-1 l2-2 l3-2; do
  lanes=${run:1:1}
  HOOKSTREAM_RELAY_LANES=$lanes timeout 900 .venv/bin/python -m benchmarks.pipeline --rate 250 --endpoints-per-event 4 --duration 60 --no-bad --no-yardsticks --label s4-lanes-$run > /tmp/exp/s4-lanes-$run.out 2>&1
done
echo done > /tmp/exp/lanes.done
