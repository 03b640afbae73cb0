#!/usr/bin/env bash
# Checks the systemd units under deploy/systemd/ with `systemd-analyze verify`: unknown
# keys, bad values, a missing ExecStart binary. Skips, saying so, only when
# systemd-analyze is not installed.
#
# verify wants each ExecStart binary to exist, so each unit is checked from a temporary
# copy whose ExecStart points at a built `revenant` (REVENANT_BIN, else target/debug or
# target/release, else it is built). A template (revenant-work@.service) is checked
# as an instance of it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "deploy-check: SKIPPED: systemd-analyze is not installed, the units under deploy/systemd/ were not verified"
  exit 0
fi

bin=${REVENANT_BIN:-}
if [ -z "$bin" ]; then
  for candidate in target/debug/revenant target/release/revenant; do
    if [ -x "$candidate" ]; then bin=$candidate; break; fi
  done
fi
if [ -z "$bin" ]; then
  cargo build --quiet -p revenant-cli
  bin=target/debug/revenant
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

status=0
for unit in deploy/systemd/*.service; do
  name=$(basename "$unit")
  case "$name" in
    *@.service) name=${name%@.service}@check.service ;;
  esac
  sed "s|/usr/local/bin/revenant|$bin|g" "$unit" >"$tmp/$name"
  # verify prints problems on stderr; some (unknown keys) without failing, so any line
  # that names our unit fails the check too.
  ok=yes
  if ! out=$(systemd-analyze verify --man=no "$tmp/$name" 2>&1); then
    ok=no
  fi
  if printf '%s\n' "$out" | grep -qF "$name"; then
    ok=no
  fi
  if [ -n "$out" ]; then
    printf '%s\n' "$out" | sed "s|^|  $name: |"
  fi
  if [ "$ok" = yes ]; then
    echo "deploy-check: $(basename "$unit") ok"
  else
    echo "deploy-check: $(basename "$unit") FAILED"
    status=1
  fi
done
exit "$status"
