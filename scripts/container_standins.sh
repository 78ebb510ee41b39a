#!/usr/bin/env bash
# Builds local stand-ins for the public images that hookstream's Dockerfile and
# docker-compose.yml name, tagged with the official names so both files run unchanged:
#
#   localhost/debian:bookworm           debootstrap --variant=minbase bookworm + host CAs
#   docker.io/library/python:3.11-slim  Debian's Python 3.11, laid out as the official image
#   docker.io/library/postgres:15       Debian's PostgreSQL 15 + a POSTGRES_* entry point
#   docker.io/apache/kafka:4.1.1        Debian's Java 17 + the Kafka jars of stack/pom.xml
#   docker.io/prom/prometheus:v2.53.2   Debian's Prometheus (2.42)
#
# They exist only because the development machines reach Debian's archive, PyPI and Maven
# Central but no image registry; where Docker Hub is reachable, use the real images.
# Sources: deploy/containers/standins/<image>/. podman is pointed at
# deploy/containers/containers.conf (runc, ulimits this kernel accepts): run your own
# podman / podman-compose calls with the CONTAINERS_CONF this script prints.
#
# Usage: scripts/container_standins.sh [--refresh] [--smoke] [IMAGE...]
#   IMAGE      debian python postgres kafka prometheus (default: all; debian is always
#              brought up to date first, the others are built on it)
#   --refresh  debootstrap again and rebuild every layer (picks up Debian's updates)
#   --smoke    then start each image as docker-compose.yml does and check it answers
#              (python: builds the project's Dockerfile as localhost/hookstream:dev)
#
# Idempotent: an image is built only when it is missing or when the digest of its inputs
# (its folder, the files staged beside it, the id of the image it is built on) differs
# from the one in its io.hookstream.standin.inputs label. Needs root (rootful podman,
# debootstrap); installs what it needs with apt-get. Cache (the debootstrap tarball, build
# staging, build logs): $HOOKSTREAM_CONTAINERS_CACHE, default ~/.cache/hookstream-containers.
set -Eeuo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STANDINS=$REPO/deploy/containers/standins
export CONTAINERS_CONF=$REPO/deploy/containers/containers.conf
CACHE=${HOOKSTREAM_CONTAINERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hookstream-containers}
LOGS=$CACHE/logs
LABEL=io.hookstream.standin.inputs
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
ROOTFS_TAR=$CACHE/debian-$SUITE-minbase-slim.tar
# netavark + aardvark-dns: compose networks where containers find each other by name;
# catatonit: `--init`; the rest is what podman leaves to Recommends.
HOST_PACKAGES=(podman runc netavark aardvark-dns slirp4netns uidmap catatonit iptables
               debootstrap ca-certificates)

ORDER=(debian python postgres kafka prometheus)
declare -A TAGS=(
    [debian]=localhost/debian:bookworm
    [python]=docker.io/library/python:3.11-slim
    [postgres]=docker.io/library/postgres:15
    [kafka]=docker.io/apache/kafka:4.1.1
    [prometheus]=docker.io/prom/prometheus:v2.53.2
)
declare -A RESULT=()
TEMP_DIRS=()
SMOKE_CONTAINERS=()
SMOKE_NETWORK=''

say() { printf 'container_standins: %s\n' "$*"; }
die() {
    printf 'container_standins: error: %s\n' "$*" >&2
    exit 1
}
cleanup() {
    local dir
    for dir in "${TEMP_DIRS[@]}"; do
        rm -rf "$dir"
    done
    if ((${#SMOKE_CONTAINERS[@]})); then
        podman rm -f -v "${SMOKE_CONTAINERS[@]}" >/dev/null 2>&1 || true
    fi
    if [[ -n $SMOKE_NETWORK ]]; then
        podman network rm -f "$SMOKE_NETWORK" >/dev/null 2>&1 || true
    fi
}
on_error() {
    local rc=$?
    die "line $1: \`$2\` exited with $rc"
}
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR
trap cleanup EXIT

seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

usage() {
    sed -n 's/^# \{0,1\}//; /^Usage:/,/^$/p' "${BASH_SOURCE[0]}" | sed '$d'
    exit "$1"
}

# ----------------------------------------------------------------------------- host

apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        if [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) != 'install ok installed' ]]; then
            missing+=("$pkg")
        fi
    done
    ((${#missing[@]})) || return 0
    local started=$EPOCHREALTIME
    say "installing with apt-get: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq \
        || die "apt-get update failed (is Debian's archive reachable?)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
    say "installed in $(seconds_since "$started") s"
}

check_podman() {
    local runtime
    runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}' 2>"$LOGS/podman-info.err") \
        || die "podman does not work with CONTAINERS_CONF=$CONTAINERS_CONF:" \
            "$(cat "$LOGS/podman-info.err")"
    if [[ -s $LOGS/podman-info.err ]]; then
        cat "$LOGS/podman-info.err" >&2
    fi
    [[ $runtime == runc ]] \
        || die "podman uses the runtime '$runtime', not runc: is $CONTAINERS_CONF read?"
}

# ----------------------------------------------------------------------------- inputs

# One digest over every file under a folder: path, mode and content.
tree_digest() {
    (
        cd "$1"
        find . \( -type f -o -type l \) -print0 | LC_ALL=C sort -z \
            | while IFS= read -r -d '' f; do
                printf '%s %s %s\n' "$f" "$(stat -L -c %a "$f")" \
                    "$(sha256sum <"$f" | cut -d' ' -f1)"
            done
    ) | sha256sum | cut -d' ' -f1
}

image_id() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# After a rebuild, the image the tag pointed at before: removed with its intermediate
# layers once nothing names it, unless a container or another image still uses it.
remove_superseded() {
    local old=$1 tag=$2
    [[ -n $old && $old != "$(image_id "$tag")" ]] || return 0
    [[ $(podman image inspect --format '{{len .RepoTags}}' "$old" 2>/dev/null) == 0 ]] || return 0
    if ! podman rmi "$old" >/dev/null 2>&1; then
        say "kept the previous $tag (${old:0:12}): still in use"
    fi
}

image_label() {
    local value
    value=$(podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$1" 2>/dev/null) \
        || return 0
    [[ $value == '<no value>' ]] || printf '%s' "$value"
}

# A fresh copy of the image's folder under the cache: the build context.
stage() {
    local dir=$CACHE/stage/$1
    rm -rf "$dir"
    mkdir -p "$dir"
    cp -a "$STANDINS/$1/." "$dir/"
    printf '%s' "$dir"
}

# The debootstrapped root file system, made once (about 40 s) and kept as a tarball.
ensure_rootfs() {
    if [[ -s $ROOTFS_TAR && -z $REFRESH ]]; then
        return 0
    fi
    local started=$EPOCHREALTIME tmp
    tmp=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    TEMP_DIRS+=("$tmp")
    say "debian: debootstrap --variant=minbase $SUITE (cached afterwards in $ROOTFS_TAR)"
    debootstrap --variant=minbase "$SUITE" "$tmp/rootfs" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1 \
        || die "debootstrap failed (is $MIRROR reachable?); log: $LOGS/debootstrap.log"
    local root=$tmp/rootfs dir
    # What a container gets from its runtime, what debootstrap copied from this host, and
    # the one-line sources.list that debian.sources replaces.
    rm -rf "${root:?}"/dev/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb \
        "$root"/var/cache/apt/*.bin "$root"/etc/resolv.conf "$root"/etc/hostname \
        "$root"/etc/apt/sources.list
    # As in Debian's -slim images (dpkg-slim.cfg does the same for later installs): no
    # documentation, manuals or translations, 45 MB of the 127; licences and the folders
    # themselves stay (maintainer scripts expect /usr/share/man/man1).
    find "$root/usr/share/doc" \( -type f -o -type l \) ! -name copyright -delete
    for dir in man info groff lintian linda; do
        if [[ -d $root/usr/share/$dir ]]; then
            find "$root/usr/share/$dir" \( -type f -o -type l \) -delete
        fi
    done
    find "$root/usr/share/locale" \( -type f -o -type l \) ! -name locale.alias -delete
    tar --numeric-owner -C "$root" -cf "$tmp/rootfs.tar" .
    mv "$tmp/rootfs.tar" "$ROOTFS_TAR"
    say "debian: rootfs in $(seconds_since "$started") s ($(du -h "$ROOTFS_TAR" | cut -f1))"
}

stage_debian() {
    local dir=$1
    ensure_rootfs
    ln "$ROOTFS_TAR" "$dir/rootfs.tar" 2>/dev/null || cp "$ROOTFS_TAR" "$dir/rootfs.tar"
    mkdir -p "$dir/certs/local"
    [[ -s /etc/ssl/certs/ca-certificates.crt ]] \
        || die "the host has no /etc/ssl/certs/ca-certificates.crt (apt-get install ca-certificates)"
    cp /etc/ssl/certs/ca-certificates.crt "$dir/certs/ca-certificates.crt"
    if [[ -d /usr/local/share/ca-certificates ]]; then
        cp -a /usr/local/share/ca-certificates/. "$dir/certs/local/"
    fi
}

stage_kafka() {
    local dir=$1 python=python3 libs
    [[ -x $REPO/.venv/bin/python ]] && python=$REPO/.venv/bin/python
    if ! compgen -G "$REPO/stack/.kafka-libs/kafka_2.13-*.jar" >/dev/null \
        && ! command -v mvn >/dev/null; then
        apt_install maven
    fi
    # The project's own resolution (stack/pom.xml, re-resolved when the pom changes).
    libs=$(cd "$REPO" && PYTHONPATH=$REPO/src "$python" -c \
        'from hookstream.dev.localstack.kafka import ensure_jars; print(ensure_jars())' | tail -n 1) \
        || die "resolving the Kafka jars (stack/pom.xml) failed"
    compgen -G "$libs/kafka_2.13-4.1.1.jar" >/dev/null \
        || die "$libs has no kafka_2.13-4.1.1.jar: stack/pom.xml and the image tag disagree"
    mkdir -p "$dir/libs"
    cp -l "$libs"/*.jar "$dir/libs/" 2>/dev/null || cp "$libs"/*.jar "$dir/libs/"
}

# ----------------------------------------------------------------------------- smoke

# Polls a command until it succeeds; fails after timeout_s naming what never came.
wait_for() {
    local what=$1 timeout_s=$2 started=$EPOCHREALTIME
    shift 2
    until "$@" >/dev/null 2>&1; do
        if (($(awk -v a="$started" -v b="$EPOCHREALTIME" -v t="$timeout_s" 'BEGIN { print (b - a > t) }'))); then
            die "smoke: $what did not happen within $timeout_s s"
        fi
        sleep 0.5
    done
    say "smoke: $what after $(seconds_since "$started") s"
}

smoke_run() {
    local name=$1
    shift
    SMOKE_CONTAINERS+=("$name")
    podman run -d --name "$name" --network "$SMOKE_NETWORK" "$@" >/dev/null
}

# Whether a container's log has a line matching a pattern (read whole first: grep -q
# closing the pipe early would fail the pipeline under pipefail).
logs_have() {
    local logs
    logs=$(podman logs "$1" 2>&1)
    grep -q -- "$2" <<<"$logs"
}

# Waits for a container to exit; prints its exit code.
wait_exit() { podman wait "$1" | tail -n 1; }

smoke_postgres() {
    local c=$SMOKE_NETWORK-postgres client=(podman run --rm --network "$SMOKE_NETWORK")
    smoke_run "$c" --network-alias postgres -e POSTGRES_USER=hookstream \
        -e POSTGRES_PASSWORD=hookstream -e POSTGRES_DB=hookstream "${TAGS[postgres]}"
    wait_for "postgres: pg_isready" 60 podman exec "$c" pg_isready -U hookstream -d hookstream
    # over the network, as the services connect: the password is asked for and checked
    "${client[@]}" -e PGPASSWORD=hookstream "${TAGS[postgres]}" \
        psql -h postgres -U hookstream -d hookstream -Atc 'select current_user, version()'
    if "${client[@]}" -e PGPASSWORD=wrong "${TAGS[postgres]}" \
        psql -h postgres -U hookstream -d hookstream -c 'select 1' >/dev/null 2>&1; then
        die "smoke: postgres accepted a wrong password"
    fi
    local server_user
    server_user=$(podman exec "$c" sh -c 'stat -c %U /proc/$(head -n 1 "$PGDATA/postmaster.pid")')
    [[ $server_user == postgres ]] || die "smoke: the server runs as $server_user, not postgres"
    podman kill --signal TERM "$c" >/dev/null
    local code
    code=$(wait_exit "$c")
    logs_have "$c" 'received fast shutdown request' \
        || die "smoke: SIGTERM was not PostgreSQL's fast shutdown (exit $code)"
    say "smoke: postgres ok (password checked over the network, server user postgres," \
        "SIGTERM -> fast shutdown, exit $code)"
}

smoke_kafka() {
    local c=$SMOKE_NETWORK-kafka topics=(/opt/kafka/bin/kafka-topics.sh --bootstrap-server localhost:9092)
    # docker-compose.yml's environment for its one broker, every variable of it.
    smoke_run "$c" --network-alias kafka \
        -e CLUSTER_ID=4L6g3nShT-eMCtK--X86sw -e KAFKA_NODE_ID=1 \
        -e KAFKA_PROCESS_ROLES=broker,controller \
        -e KAFKA_LISTENERS=PLAINTEXT://:9092,CONTROLLER://:9093 \
        -e KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://kafka:9092 \
        -e KAFKA_CONTROLLER_LISTENER_NAMES=CONTROLLER \
        -e KAFKA_LISTENER_SECURITY_PROTOCOL_MAP=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT \
        -e KAFKA_CONTROLLER_QUORUM_VOTERS=1@kafka:9093 \
        -e KAFKA_INTER_BROKER_LISTENER_NAME=PLAINTEXT \
        -e KAFKA_DEFAULT_REPLICATION_FACTOR=1 -e KAFKA_MIN_INSYNC_REPLICAS=1 \
        -e KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR=1 \
        -e KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR=1 \
        -e KAFKA_TRANSACTION_STATE_LOG_MIN_ISR=1 \
        -e KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR=1 \
        -e KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR=1 \
        -e KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE=false \
        -e KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS=0 \
        -e KAFKA_AUTO_CREATE_TOPICS_ENABLE=false -e KAFKA_NUM_PARTITIONS=6 \
        -e KAFKA_GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS=1000 \
        -e KAFKA_GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS=250 \
        -e KAFKA_GROUP_CONSUMER_SESSION_TIMEOUT_MS=3000 \
        -e KAFKA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS=500 \
        -e KAFKA_BROKER_SESSION_TIMEOUT_MS=3000 -e KAFKA_BROKER_HEARTBEAT_INTERVAL_MS=500 \
        "${TAGS[kafka]}"
    wait_for "kafka: kafka-topics.sh --list answers" 120 podman exec "$c" "${topics[@]}" --list
    podman exec "$c" "${topics[@]}" --create --topic smoke --partitions 6 >/dev/null
    grep -qx smoke <<<"$(podman exec "$c" "${topics[@]}" --list)" \
        || die "smoke: kafka lists no topic 'smoke' after creating it"
    podman exec "$c" /opt/kafka/bin/kafka-consumer-groups.sh --bootstrap-server localhost:9092 \
        --list >/dev/null
    local props=/opt/kafka/config/server.properties
    podman exec "$c" grep -qx 'group.consumer.session.timeout.ms=3000' "$props" \
        || die "smoke: KAFKA_GROUP_CONSUMER_SESSION_TIMEOUT_MS did not reach $props"
    podman exec "$c" test -s /var/lib/kafka/data/meta.properties \
        || die "smoke: kafka keeps no data in /var/lib/kafka/data"
    local uid
    uid=$(podman exec "$c" id -u)
    [[ $uid != 0 ]] || die "smoke: kafka runs as root"
    podman kill --signal TERM "$c" >/dev/null
    local code
    code=$(wait_exit "$c")
    logs_have "$c" 'shut down completed' \
        || die "smoke: SIGTERM did not shut kafka down cleanly (exit $code)"
    # the storage formatted on the first start is kept on the next
    podman start "$c" >/dev/null
    wait_for "kafka: restarted on its formatted storage" 120 podman exec "$c" "${topics[@]}" --list
    grep -qx smoke <<<"$(podman exec "$c" "${topics[@]}" --list)" \
        || die "smoke: the topic 'smoke' did not survive a restart"
    say "smoke: kafka ok (uid $uid, topics listed and kept across a restart, SIGTERM ->" \
        "controlled shutdown, exit $code)"
}

smoke_prometheus() {
    local c=$SMOKE_NETWORK-prometheus
    smoke_run "$c" -v "$REPO/deploy/prometheus:/etc/prometheus:ro" "${TAGS[prometheus]}" \
        --config.file=/etc/prometheus/prometheus.yml --storage.tsdb.path=/prometheus \
        --storage.tsdb.retention.time=15d
    wait_for "prometheus: /-/ready" 60 \
        podman exec "$c" wget -q -O /dev/null http://127.0.0.1:9090/-/ready
    say "smoke: prometheus ok ($(podman exec "$c" prometheus --version 2>&1 | head -n 1))"
}

smoke_python() {
    local app=localhost/hookstream:dev started=$EPOCHREALTIME previous
    previous=$(image_id "$app")
    podman build --pull=never --tag "$app" "$REPO" >"$LOGS/hookstream-dev.log" 2>&1 || {
        tail -n 30 "$LOGS/hookstream-dev.log" >&2
        die "smoke: building the project's Dockerfile failed; log: $LOGS/hookstream-dev.log"
    }
    remove_superseded "$previous" "$app"
    say "smoke: built $app from Dockerfile in $(seconds_since "$started") s"
    podman run --rm "$app" --help >/dev/null
    podman run --rm --entrypoint python "$app" -c 'import hookstream.dispatcher.main, hookstream.fanout.main, hookstream.relay.main, confluent_kafka, psycopg'
    local size
    size=$(podman image inspect --format '{{.Size}}' "$app" | awk '{ printf "%.0f MB", $1 / 1e6 }')
    say "smoke: python ok ($app: --help and the services' imports; $size)"
}

smoke() {
    SMOKE_NETWORK=hs-standin-smoke-$$
    podman network create "$SMOKE_NETWORK" >/dev/null
    local name
    for name in "$@"; do
        case $name in
            python | postgres | kafka | prometheus) "smoke_$name" ;;
        esac
    done
}

# ----------------------------------------------------------------------------- build

build() {
    local name=$1 tag=${TAGS[$1]} started=$EPOCHREALTIME dir digest parent=''
    dir=$(stage "$name")
    case $name in
        debian) stage_debian "$dir" ;;
        kafka) stage_kafka "$dir" ;;
    esac
    [[ $name == debian ]] || parent=$(image_id "${TAGS[debian]}")
    digest=$( { tree_digest "$dir"; printf '%s\n' "$parent"; } | sha256sum | cut -d' ' -f1)
    local built_from reason
    built_from=$(image_label "$tag")
    if [[ -n $REFRESH ]]; then
        reason='--refresh'
    elif [[ -z $(image_id "$tag") ]]; then
        reason='no such image'
    elif [[ $built_from != "$digest" ]]; then
        reason="inputs changed: ${built_from:0:12} -> ${digest:0:12}"
    else
        rm -rf "$dir"
        RESULT[$name]="up to date ($(seconds_since "$started") s)"
        say "$name: $tag up to date"
        return 0
    fi
    say "$name: building $tag ($reason; log: $LOGS/$name.log)"
    local flags=(--pull=never --layers --label "$LABEL=$digest" --tag "$tag") previous
    [[ -z $REFRESH ]] || flags+=(--no-cache)
    previous=$(image_id "$tag")
    if ! podman build "${flags[@]}" --file "$dir/Containerfile" "$dir" >"$LOGS/$name.log" 2>&1; then
        tail -n 30 "$LOGS/$name.log" >&2
        die "building $tag failed; full log: $LOGS/$name.log"
    fi
    remove_superseded "$previous" "$tag"
    # Staged copies of the rootfs and the jars are not needed once built.
    rm -rf "$dir"
    RESULT[$name]="built in $(seconds_since "$started") s"
    say "$name: ${RESULT[$name]}"
}

summary() {
    local name size
    printf '\n%-11s %-36s %9s  %s\n' image tag size result
    for name in "${ORDER[@]}"; do
        [[ -n ${RESULT[$name]:-} ]] || continue
        size=$(podman image inspect --format '{{.Size}}' "${TAGS[$name]}" \
            | awk '{ printf "%.0f MB", $1 / 1e6 }')
        printf '%-11s %-36s %9s  %s\n' "$name" "${TAGS[$name]}" "$size" "${RESULT[$name]}"
    done
    printf '\npodman and podman-compose need: export CONTAINERS_CONF=%s\n' "$CONTAINERS_CONF"
}

main() {
    REFRESH=''
    local wanted=() arg run_smoke=''
    for arg in "$@"; do
        case $arg in
            --refresh) REFRESH=1 ;;
            --smoke) run_smoke=1 ;;
            -h | --help) usage 0 ;;
            -*) usage 2 ;;
            *)
                [[ -n ${TAGS[$arg]:-} ]] || die "unknown image '$arg' (one of: ${ORDER[*]})"
                wanted+=("$arg")
                ;;
        esac
    done
    ((${#wanted[@]})) || wanted=("${ORDER[@]}")
    [[ $(id -u) == 0 ]] || die "run as root: the stand-ins are built with rootful podman"

    local started=$EPOCHREALTIME name
    mkdir -p "$CACHE" "$LOGS"
    # One run at a time: runs share the staging folders and the tags.
    exec 9>"$CACHE/lock"
    if ! flock -n 9; then
        say "waiting for another run of this script to finish"
        flock 9
    fi
    apt_install "${HOST_PACKAGES[@]}"
    check_podman
    build debian
    for name in "${ORDER[@]}"; do
        [[ $name != debian ]] || continue
        if [[ " ${wanted[*]} " == *" $name "* ]]; then
            build "$name"
        fi
    done
    summary
    say "built in $(seconds_since "$started") s"
    if [[ -n $run_smoke ]]; then
        started=$EPOCHREALTIME
        smoke "${wanted[@]}"
        say "smoke checks passed in $(seconds_since "$started") s"
    fi
}

main "$@"
