#!/usr/bin/env bash
# Property-based fuzzing of `revenant serve`'s HTTP API against its own /openapi.json,
# with schemathesis: every operation gets generated requests, valid and invalid, and
# the run fails on any server error (5xx), on an answer that does not match the
# document (status, content type, body schema), on invalid input that is accepted,
# and on a protected route that answers without a token.
#
#   scripts/api-fuzz.sh           # the short run CI uses (a minute or two)
#   scripts/api-fuzz.sh --long    # many more examples per operation
#   API_FUZZ_SEED=123 scripts/api-fuzz.sh   # replay a run (the seed is printed)
#   API_FUZZ_DATABASE_URL=postgres://.../scratch scripts/api-fuzz.sh
#                                 # against PostgreSQL: a scratch database, which the
#                                 # run fills with junk and does not clean
#
# It builds the `revenant` binary, starts `revenant serve` on a fresh SQLite file in a
# temporary directory with one admin token, and installs a pinned schemathesis in a
# Python virtualenv under target/ (git-ignored), once. Needs python3 with venv.
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
venv=$PWD/target/api-fuzz-venv
examples=25
max_time=60
if [ "${1:-}" = "--long" ]; then
    examples=400
    max_time=600
elif [ $# -gt 0 ]; then
    echo "usage: scripts/api-fuzz.sh [--long]" >&2
    exit 2
fi
seed=${API_FUZZ_SEED:-$(( (RANDOM << 15) | RANDOM ))}

log() { echo "api-fuzz: $*" >&2; }

if [ ! -x "$venv/bin/schemathesis" ] ||
    [ "$("$venv/bin/schemathesis" --version 2>/dev/null)" != "schemathesis, version $SCHEMATHESIS_VERSION" ]; then
    log "installing schemathesis $SCHEMATHESIS_VERSION into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

log "building revenant"
cargo build --quiet --locked -p revenant-cli
bin=target/debug/revenant

work=$(mktemp -d)
# The JUnit report, and the server's log of a failed run, stay here (git-ignored).
report=$PWD/target/api-fuzz-report
rm -rf "$report"
mkdir -p "$report"
server_pid=
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
database_url=${API_FUZZ_DATABASE_URL:-sqlite://$work/fuzz.db}

# Starts `revenant serve` (with the admin token, or with none: loopback mode, where
# Host, Origin and Content-Type are checked) and sets `base` to its URL.
start_server() {
    local mode=$1 log=$work/serve-$1.log
    if [ "$mode" = tokens ]; then
        REVENANT_TOKENS="fuzz:admin:$token" REVENANT_LOG=warn \
            "$bin" --database-url "$database_url" serve --listen 127.0.0.1:0 2>"$log" &
    else
        REVENANT_TOKENS= REVENANT_LOG=warn \
            "$bin" --database-url "$database_url" serve --listen 127.0.0.1:0 2>"$log" &
    fi
    server_pid=$!
    local address=
    for _ in $(seq 1 300); do
        address=$(sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "$log" | head -n1)
        [ -n "$address" ] && break
        if ! kill -0 "$server_pid" 2>/dev/null; then
            cat "$log" >&2
            log "revenant serve ($mode) did not start"
            exit 1
        fi
        sleep 0.1
    done
    if [ -z "$address" ]; then
        log "revenant serve ($mode) printed no address"
        exit 1
    fi
    base=$address
}

stop_server() {
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}

start_server tokens
# Some jobs in several states, so operations on ids and dead letters meet real rows.
python3 - "$base" "$token" <<'EOF'
import json, sys, urllib.request
base, token = sys.argv[1], sys.argv[2]
def post(path, body):
    request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())
post("/v1/jobs", {"jobs": [{"queue": "emails", "kind": "send"}, {"queue": "emails", "kind": "send"},
                           {"queue": "emails", "kind": "send", "delay": "1h"}]})
claimed = post("/v1/claims", {"queue": "emails", "worker": "seed", "limit": 2})["jobs"]
post(f"/v1/jobs/{claimed[0]['id']}/fail", {"lease_token": claimed[0]["lease_token"],
     "class": "permanent", "message": "HTTP 503 from provider after 120ms"})
EOF

log "fuzzing $base with $examples examples per operation, seed $seed"
status=0
# From the temporary directory: schemathesis keeps a cache in the working directory.
(cd "$work" && "$venv/bin/schemathesis" run "$base/openapi.json" \
    --header "Authorization: Bearer $token" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,negative_data_rejection,ignored_auth,unsupported_method \
    --phases examples,coverage,fuzzing \
    --max-examples "$examples" \
    --max-time "$max_time" \
    --seed "$seed" \
    --workers 1 \
    --request-timeout 40 \
    --suppress-health-check all \
    --generation-database none \
    --no-color \
    --report junit --report-dir "$report") || status=$?

stop_server
# The same database behind a server with no tokens (loopback mode): the checks that keep
# web pages and DNS rebinding out must answer as documented too. Fewer examples: the
# shapes are the same, only the gate in front differs.
start_server none
log "fuzzing $base without tokens (loopback mode), seed $seed"
(cd "$work" && "$venv/bin/schemathesis" run "$base/openapi.json" \
    --header "Content-Type: application/json" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
    --phases coverage,fuzzing \
    --max-examples "$(( examples / 5 + 1 ))" \
    --max-time "$max_time" \
    --seed "$seed" \
    --workers 1 \
    --request-timeout 40 \
    --suppress-health-check all \
    --generation-database none \
    --no-color \
    --report junit --report-dir "$report") || status=$?
stop_server

# A 5xx is logged as `status=5..` by the request log; a panic kills a connection, which
# schemathesis reports as a network error, and leaves its message here.
if cat "$work"/serve-*.log | grep -q "status=5[0-9][0-9]\|panicked"; then
    log "the server logged errors:"
    cat "$work"/serve-*.log | grep "status=5[0-9][0-9]\|panicked" | head -n 20 >&2
    status=1
fi
if [ "$status" -ne 0 ]; then
    cp "$work"/serve-*.log "$report/"
    log "the server's log and the JUnit report are in $report"
    log "FAILED (seed $seed; replay with API_FUZZ_SEED=$seed scripts/api-fuzz.sh)"
else
    log "ok: no server error, every answer matched /openapi.json"
fi
exit "$status"
