#!/usr/bin/env bash
# The test command: every crate's tests, both backends, then the doc tests.
#
# PostgreSQL: scripts/ensure-postgres.sh finds or starts a server and prints the URL
# the tests use (REVENANT_TEST_DATABASE_URL). Under CI=true a missing server fails the
# run; elsewhere it starts a throwaway cluster when initdb/pg_ctl exist, or says how to
# install PostgreSQL.
#
# Extra arguments go to the test runner: `scripts/test.sh conformance::postgres`.
set -euo pipefail
cd "$(dirname "$0")/.."

pg_env=$(bash scripts/ensure-postgres.sh)
eval "$pg_env"
echo "PostgreSQL for tests: ${REVENANT_TEST_DATABASE_URL:-none}" >&2

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  echo "cargo-nextest not found; using cargo test (install it with: cargo install cargo-nextest)" >&2
  cargo test --workspace --no-fail-fast "$@"
fi
if [ $# -eq 0 ]; then
  cargo test --workspace --doc --quiet
fi
