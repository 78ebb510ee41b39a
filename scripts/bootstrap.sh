#!/usr/bin/env bash
# Idempotent setup of a fresh Debian 12 machine (or container) for hookstream:
#   Java 17+, Maven, PostgreSQL server binaries, Prometheus + promtool, chromium, Go (Debian
#   packages),
#   the Python venv .venv with `pip install -e '.[dev]'`, and the Kafka jars in
#   stack/.kafka-libs.
# Only the Debian, PyPI and Maven Central registries are needed. Prints what it
# does and is quiet otherwise; a second run does nothing. Then:
#   .venv/bin/python -m hookstream.dev.localstack up
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

say() { printf 'bootstrap: %s\n' "$*"; }
die() { printf 'bootstrap: error: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); fi
fi

APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install $* by hand"
  if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
    die "need root (or sudo) to apt-get install $*"
  fi
  if [ "$APT_UPDATED" -eq 0 ]; then
    say "apt-get update"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
  say "apt-get install $*"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "$@" >/dev/null
}

java_major() {  # major version of `java` on PATH, 0 if none
  command -v java >/dev/null 2>&1 || { echo 0; return; }
  local v
  v="$(java -version 2>&1 | sed -n 's/.*version "\([^"]*\)".*/\1/p' | head -n1)"
  case "$v" in
    1.*) echo "${v#1.}" | cut -d. -f1 ;;
    "") echo 0 ;;
    *) echo "$v" | cut -d. -f1 | cut -d- -f1 ;;
  esac
}

have_pg_server() { compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }

find_python() {  # first python3 >= 3.11 with venv + ensurepip
  local c
  for c in python3.13 python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null 2>&1 &&
      "$c" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      command -v "$c"
      return 0
    fi
  done
  return 1
}

# ---------------------------------------------------------------- Debian packages
pkgs=()
if [ "$(java_major)" -lt 17 ]; then
  pkgs+=(openjdk-17-jre-headless)
  # slim images lack the man folders; the JRE's postinst (update-alternatives) needs it
  "${SUDO[@]}" mkdir -p /usr/share/man/man1 || true
fi
command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
# Maven Central and PyPI over HTTPS (slim images ship without the CA bundle)
[ -f /etc/ssl/certs/ca-certificates.crt ] || pkgs+=(ca-certificates)
if ! find_python >/dev/null; then
  pkgs+=(python3 python3-venv)
fi
# Prometheus (+ promtool) for the observability tests; the tests start their own server,
# Debian's systemd unit is not used (and not started in containers without systemd)
command -v promtool >/dev/null 2>&1 || pkgs+=(prometheus)
# Go builds the benchmark's receiver farm (benchmarks/receiver_farm_go; its tests run in
# the suite); any Go from 1.19 on, Debian's or the machine's own
command -v go >/dev/null 2>&1 || pkgs+=(golang-go)
# Debian's chromium for the console's browser tests (Playwright drives it; Playwright's
# own browser download cannot work without the wider network), and a font to render text
command -v chromium >/dev/null 2>&1 || pkgs+=(chromium)
[ -d /usr/share/fonts/truetype/dejavu ] || pkgs+=(fonts-dejavu-core)
if [ ${#pkgs[@]} -gt 0 ]; then
  apt_install "${pkgs[@]}"
fi
if [ "$(java_major)" -lt 17 ]; then
  die "java on PATH is still older than 17; point it at /usr/lib/jvm/java-17-* (update-alternatives --config java) or set JAVA_HOME"
fi

if ! have_pg_server; then
  # We only need the server binaries: hookstream.dev.localstack runs its own cluster in
  # .stack/pg. Install postgresql-common first and switch off the Debian default
  # cluster (15/main on port 5432), so the package creates and starts no service.
  apt_install postgresql-common
  if [ -f /etc/postgresql-common/createcluster.conf ]; then
    "${SUDO[@]}" sed -ri 's/^#?\s*create_main_cluster\s*=.*/create_main_cluster = false/' \
      /etc/postgresql-common/createcluster.conf
  fi
  apt_install postgresql
  # in case a default cluster was created and started anyway: stop it, it is not ours
  if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters -h 2>/dev/null | while read -r ver name _port status _rest; do
      case "$status" in
        online*)
          say "stopping the Debian default cluster $ver/$name (not used; the stack runs its own)"
          "${SUDO[@]}" pg_ctlcluster "$ver" "$name" stop || true
          ;;
      esac
    done || true
  fi
  have_pg_server || die "postgresql installed but no /usr/lib/postgresql/*/bin/postgres"
fi

# ---------------------------------------------------------------- Python venv
PY="$(find_python)" || die "no python3 >= 3.11 with venv/ensurepip found"
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  say "creating .venv with $PY"
  rm -rf .venv
  "$PY" -m venv .venv
fi
STAMP=.venv/.hookstream-pyproject.sha256
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ "$want" != "$have" ] || ! .venv/bin/python -c 'import hookstream.dev.localstack' 2>/dev/null; then
  say "pip install -e '.[dev]' into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
  echo "$want" >"$STAMP"
fi

# ---------------------------------------------------------------- Kafka jars
if ! compgen -G 'stack/.kafka-libs/kafka_2.13-*.jar' >/dev/null || [ ! -f stack/.kafka-libs/.pom.sha256 ] ||
  [ "$(cat stack/.kafka-libs/.pom.sha256)" != "$(sha256sum stack/pom.xml | cut -d' ' -f1)" ]; then
  # resolves (mvn -B -q -f stack/pom.xml dependency:copy-dependencies) only when the
  # jars are missing or stack/pom.xml changed; prints when it does
  .venv/bin/python -c 'from hookstream.dev.localstack.kafka import ensure_jars; ensure_jars()'
fi
