#!/usr/bin/env bash
# hookstream's containers, run as a user runs them (issue #46), on this machine's podman:
#
#   1. installs what it needs (podman, runc, debootstrap; podman-compose into .venv) and
#      builds the stand-in base images, once (scripts/container_standins.sh: the public
#      registries are out of reach here, so python:3.11-slim, postgres:15,
#      apache/kafka:4.1.1 and prom/prometheus are rebuilt locally under those names);
#   2. builds hookstream's image from the Dockerfile and brings docker-compose.yml up,
#      unchanged (+ deploy/containers/demo.yml: PostgreSQL on the host's loopback);
#   3. runs the demo through the containers (hookstream.dev.container_demo): sample
#      events → relay, fanout, dispatcher containers → a receiver verifying every
#      signature → `make demo`'s summary, then the egress-isolation checks;
#   4. stops the three services with `podman stop` and checks each drained and exited 0
#      within the stop timeout; then takes everything down (KEEP=1 leaves it running).
#
# Secrets (HOOKSTREAM_SECRET_KEYS, POSTGRES_PASSWORD) are generated into an env file
# outside the image (.containers/secrets.env, mode 600) and passed with --env-file.
# Exit non-zero on any failure. Timings go to stdout (and .containers/timings.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
export CONTAINERS_CONF="$root/deploy/containers/containers.conf"
work="$root/.containers"
mkdir -p "$work"
t0=$SECONDS
say() { echo "containers: $*"; }

scripts/bootstrap.sh >/dev/null
scripts/container_standins.sh
t_standins=$((SECONDS - t0))

secrets="$work/secrets.env"
if [ ! -s "$secrets" ]; then
  umask 077
  {
    echo "HOOKSTREAM_SECRET_KEYS=$(.venv/bin/hookstream secrets new-key)"
    echo "POSTGRES_PASSWORD=$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(24))')"
  } >"$secrets"
fi
set -a; . "$secrets"; set +a

project=hookstream-demo
compose=(.venv/bin/podman-compose -p "$project" --env-file "$secrets"
  -f docker-compose.yml -f deploy/containers/demo.yml)
down() {
  if [ "${KEEP:-0}" != 1 ]; then
    "${compose[@]}" down -v >"$work/down.log" 2>&1 || true
    podman volume prune -f >/dev/null 2>&1 || true
  fi
}
trap down EXIT
down

t=$SECONDS
say "building hookstream's image"
"${compose[@]}" build relay >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
t_build=$((SECONDS - t))
size=$(podman image inspect localhost/hookstream:latest --format '{{.Size}}')
say "image localhost/hookstream:latest $((size / 1000000)) MB, built in ${t_build} s"

# In the order the file's health and completion conditions give, by hand: podman-compose
# ignores those conditions, and turns depends_on into podman's --requires, which podman
# 4.3 cannot resolve through a finished one-shot container ("depends on container … not
# found in input list"). Hence --no-deps, stage by stage.
up() { "${compose[@]}" up -d --no-deps --force-recreate "$@" >>"$work/up.log" 2>&1 \
  || { tail -40 "$work/up.log"; exit 1; }; }
: >"$work/up.log"
servers=(postgres kafka prometheus)
if podman image exists docker.io/grafana/grafana:11.2.2; then servers+=(grafana); fi
since=$(date +%s.%N)
up "${servers[@]}"
# migrate and topics wait for their servers themselves (--wait) and must exit 0
up migrate topics
for job in migrate topics; do
  code=$(podman wait "${project}_${job}_1")
  podman logs "${project}_${job}_1" 2>&1 | sed "s/^/  $job: /" | tail -5
  [ "$code" = 0 ] || { say "$job exited $code"; exit 1; }
done
say "migrations and topics done $(.venv/bin/python -c "import time; print(round(time.time() - $since, 1))") s after start"
up relay fanout dispatcher

gateway=$(podman network inspect "${project}_egress" --format '{{range .Subnets}}{{.Gateway}}{{end}}')
dispatcher="${project}_dispatcher_1"
set +e
.venv/bin/python -m hookstream.dev.container_demo \
  --database-url "postgresql://hookstream:${POSTGRES_PASSWORD}@127.0.0.1:${HOOKSTREAM_DEMO_PG_PORT:-55433}/hookstream" \
  --receiver-host "$gateway" --since "$since" \
  --service relay=http://127.0.0.1:9101 --service fanout=http://127.0.0.1:9102 \
  --service dispatcher=http://127.0.0.1:9103 --prometheus http://172.31.250.10:9090 \
  --dispatcher-container "$dispatcher"
demo_rc=$?
set -e
if [ "$demo_rc" -ne 0 ]; then
  for s in migrate topics relay fanout dispatcher; do
    echo "--- $s"; podman logs --tail 15 "${project}_${s}_1" 2>&1 || true
  done
  exit 1
fi

# A stop is a drain: SIGTERM through the init, exit 0 within the stop timeout.
stop_rc=0
for s in relay fanout dispatcher; do
  c="${project}_${s}_1"
  t=$SECONDS
  podman stop -t 40 "$c" >/dev/null
  took=$((SECONDS - t))
  code=$(podman inspect "$c" --format '{{.State.ExitCode}}')
  say "podman stop $s: exit $code after ${took} s"
  if [ "$code" != 0 ] || [ "$took" -ge 40 ]; then stop_rc=1; podman logs --tail 20 "$c"; fi
done
say "done in $((SECONDS - t0)) s (stand-ins ${t_standins} s, image ${t_build} s)" \
  | tee "$work/timings.txt"
exit "$stop_rc"
