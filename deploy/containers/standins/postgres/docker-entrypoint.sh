#!/usr/bin/env bash
# Entry point of the postgres:15 stand-in: initialise PGDATA on the first start as the
# official image does, then exec the server (as `postgres`) so that it receives the
# signals dumb-init forwards.
set -Eeuo pipefail

log() { printf '%s docker-entrypoint: %s\n' "$(date -u +%FT%TZ)" "$*" >&2; }

# VAR_FILE names a file holding VAR (secrets mounted as files).
file_env() {
    local var=$1 file_var="${1}_FILE" default=${2:-}
    if [[ -n ${!var:-} && -n ${!file_var:-} ]]; then
        log "both $var and $file_var are set; set only one"
        exit 1
    fi
    local value=$default
    if [[ -n ${!var:-} ]]; then
        value=${!var}
    elif [[ -n ${!file_var:-} ]]; then
        value=$(<"${!file_var}")
    fi
    export "$var"="$value"
    unset "$file_var"
}

init_database() {
    file_env POSTGRES_PASSWORD
    file_env POSTGRES_USER postgres
    file_env POSTGRES_DB "$POSTGRES_USER"
    file_env POSTGRES_INITDB_ARGS
    local auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
    if [[ -z $POSTGRES_PASSWORD && $auth != trust ]]; then
        log "the database is uninitialised and POSTGRES_PASSWORD is not set; set it (or" \
            "POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without one)"
        exit 1
    fi

    log "initialising $PGDATA for user $POSTGRES_USER, database $POSTGRES_DB"
    local pwfile
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list of flags
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" $POSTGRES_INITDB_ARGS >/dev/null
    rm -f "$pwfile"
    printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"
    printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"

    # A server on a private Unix socket only: nobody connects before the database exists,
    # and pg_isready (the usual health check, on the default socket) does not report this
    # temporary server as the ready one.
    local socket_dir
    socket_dir=$(mktemp -d)
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories='$socket_dir'" \
        -w start >/dev/null
    export PGHOST=$socket_dir
    local psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname postgres)
    if [[ $POSTGRES_DB != postgres ]]; then
        "${psql[@]}" -v db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";' >/dev/null
    fi
    local f
    shopt -s nullglob
    for f in /docker-entrypoint-initdb.d/*; do
        case $f in
            *.sh)
                log "running $f"
                # shellcheck source=/dev/null  # the user's own init scripts
                if [[ -x $f ]]; then "$f"; else . "$f"; fi
                ;;
            *.sql) log "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
            *.sql.gz) log "running $f"; gzip -dc "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
            *) log "ignoring $f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    unset PGHOST POSTGRES_PASSWORD
    rmdir "$socket_dir"
    log "initialised; starting the server"
}

# `docker run postgres:15 -c shared_buffers=256MB` means the server with those flags.
if [[ ${1:-} == -* ]]; then
    set -- postgres "$@"
fi

if [[ ${1:-} == postgres ]]; then
    if [[ $(id -u) == 0 ]]; then
        # A fresh volume is root's: hand it to postgres, then drop to postgres for good.
        mkdir -p "$PGDATA"
        chown postgres:postgres "$PGDATA"
        chmod 700 "$PGDATA"
        mkdir -p /var/run/postgresql
        chown postgres:postgres /var/run/postgresql
        chmod 3777 /var/run/postgresql
        exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
    fi
    if [[ ! -s $PGDATA/PG_VERSION ]]; then
        init_database
    fi
fi

exec "$@"
