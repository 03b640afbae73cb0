#!/usr/bin/env bash
# Finds or starts a PostgreSQL server for revenant's tests and prints
#
#     export REVENANT_TEST_DATABASE_URL='postgres://...'
#
# on stdout (diagnostics go to stderr), so a caller can run
#
#     eval "$(scripts/ensure-postgres.sh)"
#     cargo test -p revenant-postgres
#
# With ENSURE_PG_ENV_FILE=path the export line is also written to that file.
#
# Where the server comes from, first match wins:
#   1. DATABASE_URL (or REVENANT_TEST_DATABASE_URL) is set: use it as is.
#   2. A server answers on 127.0.0.1:5432: use it (user postgres, trust auth; the
#      databases postgres and test are tried in that order).
#   3. CI=true: start the packaged cluster with pg_ctlcluster and fail loudly if it
#      still does not answer. CI never falls back to anything else.
#   4. initdb and pg_ctl exist (on PATH or in /usr/lib/postgresql/*/bin): start a
#      throwaway cluster in ./.pg-test/ (git-ignored) on a free port, or reuse the one
#      a previous run started. `scripts/ensure-postgres.sh stop` stops it.
#   5. Otherwise: say how to install PostgreSQL and exit non-zero.
#
# REVENANT_PG_THROWAWAY=1 skips steps 1 and 2 (to test step 4 on a machine that has a
# server).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pg_test_dir="$root/.pg-test"

log() { echo "ensure-postgres: $*" >&2; }

emit() {
    local line="export REVENANT_TEST_DATABASE_URL='$1'"
    echo "$line"
    if [ -n "${ENSURE_PG_ENV_FILE:-}" ]; then
        echo "$line" >"$ENSURE_PG_ENV_FILE"
    fi
    log "using $1"
    exit 0
}

# The newest PostgreSQL binary directory that has $1, or nothing.
find_bin() {
    if command -v "$1" >/dev/null 2>&1; then
        dirname "$(command -v "$1")"
        return
    fi
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/$1" ]; then
            echo "$dir"
            return
        fi
    done
}

# Whether a URL accepts a query (needs psql; without it, trust pg_isready).
accepts() {
    if command -v psql >/dev/null 2>&1; then
        psql "$1" -Atqc 'SELECT 1' >/dev/null 2>&1
    else
        return 0
    fi
}

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Runs a command as the postgres OS user when we are root (initdb refuses root).
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        if ! id postgres >/dev/null 2>&1; then
            log "running as root and there is no 'postgres' user to own a throwaway cluster"
            exit 1
        fi
        if command -v runuser >/dev/null 2>&1; then
            runuser -u postgres -- "$@"
        else
            su postgres -s /bin/sh -c "$(printf '%q ' "$@")"
        fi
    else
        "$@"
    fi
}

if [ "${1:-}" = "stop" ]; then
    bin="$(find_bin pg_ctl)"
    if [ -n "$bin" ] && [ -f "$pg_test_dir/data/postmaster.pid" ]; then
        as_owner "$bin/pg_ctl" -D "$pg_test_dir/data" -m fast -w stop >&2
    else
        log "no throwaway cluster is running in $pg_test_dir"
    fi
    exit 0
fi

if [ "${REVENANT_PG_THROWAWAY:-}" != 1 ]; then
    # 1. An explicit URL.
    if [ -n "${REVENANT_TEST_DATABASE_URL:-}" ]; then
        emit "$REVENANT_TEST_DATABASE_URL"
    fi
    if [ -n "${DATABASE_URL:-}" ]; then
        emit "$DATABASE_URL"
    fi

    # 2. A local server on the default port.
    if command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p 5432; then
        for db in postgres test; do
            url="postgres://postgres@127.0.0.1:5432/$db"
            if accepts "$url"; then
                emit "$url"
            fi
        done
        log "a server answers on 127.0.0.1:5432 but refuses user postgres without a password;"
        log "set DATABASE_URL to a URL that works"
        exit 1
    fi
fi

# 3. CI: start the packaged cluster, or fail.
if [ "${CI:-}" = "true" ]; then
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
        version="$(ls /etc/postgresql | sort -V | tail -n 1)"
        log "CI: starting the packaged cluster $version/main"
        pg_ctlcluster --skip-systemctl-redirect "$version" main start >&2 || true
        for _ in $(seq 1 30); do
            if pg_isready -q -h 127.0.0.1 -p 5432; then
                url="postgres://postgres@127.0.0.1:5432/postgres"
                if accepts "$url"; then
                    emit "$url"
                fi
                break
            fi
            sleep 1
        done
    fi
    log "FATAL: CI=true and no PostgreSQL answers on 127.0.0.1:5432 (DATABASE_URL is not set,"
    log "pg_ctlcluster could not start one). PostgreSQL tests must not be skipped in CI."
    exit 1
fi

# 4. A throwaway cluster under ./.pg-test/.
bin="$(find_bin initdb)"
if [ -n "$bin" ] && [ -x "$bin/pg_ctl" ]; then
    data="$pg_test_dir/data"
    mkdir -p "$pg_test_dir"
    if [ -f "$pg_test_dir/port" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        log "reusing the throwaway cluster in $data"
        emit "postgres://postgres@127.0.0.1:$(cat "$pg_test_dir/port")/postgres"
    fi
    if [ ! -f "$data/PG_VERSION" ]; then
        log "creating a throwaway cluster in $data"
        rm -rf "$data"
        mkdir -p "$data"
        if [ "$(id -u)" = 0 ]; then chown -R postgres "$pg_test_dir"; fi
        as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --no-sync >"$pg_test_dir/initdb.log" 2>&1 || {
            log "initdb failed; see $pg_test_dir/initdb.log"
            exit 1
        }
    fi
    port=54329
    while port_in_use "$port"; do port=$((port + 1)); done
    echo "$port" >"$pg_test_dir/port"
    if [ "$(id -u)" = 0 ]; then chown -R postgres "$pg_test_dir"; fi
    log "starting it on port $port (log: $pg_test_dir/server.log)"
    # fsync off: a throwaway test cluster trades durability for speed.
    as_owner "$bin/pg_ctl" -D "$data" -l "$pg_test_dir/server.log" -w -t 60 \
        -o "-p $port -k $pg_test_dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300" \
        start >&2 || {
        log "pg_ctl start failed; see $pg_test_dir/server.log"
        exit 1
    }
    emit "postgres://postgres@127.0.0.1:$port/postgres"
fi

# 5. Nothing to use.
cat >&2 <<'EOF'
ensure-postgres: no PostgreSQL server found and none can be started here.
  - Set DATABASE_URL (or REVENANT_TEST_DATABASE_URL) to a server you have, or
  - install PostgreSQL, for example:
        Debian/Ubuntu:  sudo apt-get install postgresql
        macOS:          brew install postgresql@16 && brew services start postgresql@16
        Docker:         docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16
    then run this script again.
EOF
exit 1
