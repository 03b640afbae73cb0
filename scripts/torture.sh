#!/usr/bin/env bash
# The torture suite (RELIABILITY.md's twenty tests, crates/revenant-torture), on SQLite
# and PostgreSQL, in one command:
#
#     scripts/torture.sh           # the short form: seconds per test (what CI runs)
#     scripts/torture.sh --long    # the long form: minutes per test, RELIABILITY.md's sizes
#     scripts/torture.sh --deps    # only install what the suite needs (libfaketime)
#
# Extra arguments go to the test runner: `scripts/torture.sh --long soak`.
#
# It finds or starts PostgreSQL (scripts/ensure-postgres.sh), installs libfaketime for
# the clock-skew test when it is missing and this is a Debian-like machine we are root
# on, runs the suite with every test's summary line collected in
# target/torture/summary-<form>.jsonl, and prints them as the table of
# docs/reliability.md (also written to target/torture/table-<form>.md).
#
# The long form runs one test at a time, so their timing figures (throughput with and
# without poison, timeout latency) are not measured against each other.
set -euo pipefail
cd "$(dirname "$0")/.."

form=short
deps_only=0
args=()
for arg in "$@"; do
  case "$arg" in
    --long) form=long ;;
    --deps) deps_only=1 ;;
    *) args+=("$arg") ;;
  esac
done

have_libfaketime() {
  [ -n "${REVENANT_LIBFAKETIME:-}" ] && [ -f "$REVENANT_LIBFAKETIME" ] && return 0
  ls /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1 \
    /usr/lib64/faketime/libfaketimeMT.so.1 >/dev/null 2>&1
}

if ! have_libfaketime; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "torture: installing libfaketime (the clock-skew test needs it)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libfaketime >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libfaketime >&2; } ||
      echo "torture: could not install libfaketime; the clock-skew test will say so" >&2
  else
    echo "torture: libfaketime is missing (apt-get install libfaketime); the clock-skew test will say so" >&2
  fi
fi
if [ "$deps_only" = 1 ]; then
  exit 0
fi

pg_env=$(bash scripts/ensure-postgres.sh)
eval "$pg_env"
echo "torture: PostgreSQL for tests: ${REVENANT_TEST_DATABASE_URL:-none}" >&2

mkdir -p target/torture
summary="$PWD/target/torture/summary-$form.jsonl"
: >"$summary"
export REVENANT_TORTURE_SUMMARY="$summary"
runner=(cargo nextest run -p revenant-torture --no-fail-fast)
if [ "$form" = long ]; then
  export REVENANT_TORTURE_LONG=1
  runner+=(--test-threads 1)
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "torture: cargo-nextest not found; using cargo test (install it with: cargo install cargo-nextest)" >&2
  runner=(cargo test -p revenant-torture --no-fail-fast)
  [ "$form" = long ] && runner+=(-- --test-threads 1)
fi

started=$(date +%s)
status=0
"${runner[@]}" ${args[@]+"${args[@]}"} || status=$?
took=$(($(date +%s) - started))

table="target/torture/table-$form.md"
cargo run -q -p revenant-torture --bin revenant-torture-report -- "$summary" >"$table" || true
echo
echo "== torture suite, $form form: ${took}s, exit $status; figures ($table):"
cat "$table"
exit "$status"
