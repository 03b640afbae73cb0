#!/usr/bin/env bash
# The Python client's tests (clients/python) against a real `revenant serve`, on SQLite
# and on PostgreSQL: installs the package with pip into a virtualenv under target/
# (git-ignored), type-checks it with mypy --strict, and runs pytest.
#
#   scripts/python-client-test.sh              # everything
#   scripts/python-client-test.sh -k worker    # extra arguments go to pytest
#
# The `revenant` binary is built (cargo build -p revenant-cli) unless REVENANT_BIN
# names one. PostgreSQL comes from scripts/ensure-postgres.sh; as everywhere, under
# CI=true a missing PostgreSQL fails the run, elsewhere its tests are skipped, saying
# so. Needs python3 (3.9 or newer) with venv, and psql for the PostgreSQL runs.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTEST_VERSION=8.3.5
MYPY_VERSION=1.15.0
venv=$PWD/target/python-client-venv

log() { echo "python-client-test: $*" >&2; }

if [ -z "${REVENANT_BIN:-}" ]; then
    log "building revenant"
    cargo build --quiet --locked -p revenant-cli --bin revenant
    export REVENANT_BIN=$PWD/target/debug/revenant
fi

pg_env=$(bash scripts/ensure-postgres.sh) || {
    if [ "${CI:-}" = true ]; then
        log "no PostgreSQL under CI=true"
        exit 1
    fi
    pg_env=
}
eval "$pg_env"
log "PostgreSQL for tests: ${REVENANT_TEST_DATABASE_URL:-none (its tests are skipped)}"

if [ ! -x "$venv/bin/python" ]; then
    log "creating $venv"
    python3 -m venv "$venv"
fi
if [ "$("$venv/bin/python" -m pytest --version 2>&1)" != "pytest $PYTEST_VERSION" ] ||
    [ "$("$venv/bin/python" -m mypy --version 2>/dev/null | cut -d' ' -f2)" != "$MYPY_VERSION" ]; then
    log "installing pytest $PYTEST_VERSION and mypy $MYPY_VERSION"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "pytest==$PYTEST_VERSION" "mypy==$MYPY_VERSION"
fi

# A real install, as a user would do it (not editable): the tests import what pip
# installed, py.typed included.
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps ./clients/python

log "mypy --strict (the package and the example)"
(cd clients/python && "$venv/bin/python" -m mypy --strict --cache-dir "$venv/mypy-cache" src)
"$venv/bin/python" -m mypy --strict --cache-dir "$venv/mypy-cache" examples/remote_worker.py

log "pytest"
cd clients/python/tests
"$venv/bin/python" -m pytest -p no:cacheprovider -q -ra --durations=5 "$@"
