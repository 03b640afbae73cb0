#!/usr/bin/env bash
# Runs a command while every core is kept busy by another process, as on a CI machine
# shared with other builds:
#
#     scripts/busy.sh bash scripts/test.sh      # the whole suite on a busy machine
#     BUSY_PER_CORE=2 scripts/busy.sh CMD...    # two spinners per core
#
# One CPU-bound spinner per core (nproc), at plain priority: the command competes with
# them for every core, as it would with a compiler. They stop when the command ends,
# however it ends (exit, failure, Ctrl-C), and the command's exit status is returned.
# Tests that fail only here assert on speed; they should assert on events and generous
# bounds instead (docs/reliability.md, test 26).
set -euo pipefail

if [ $# -eq 0 ]; then
  echo "usage: scripts/busy.sh COMMAND [ARGS...]" >&2
  exit 2
fi

per_core=${BUSY_PER_CORE:-1}
spinners=$(( $(nproc) * per_core ))
pids=()
stop() {
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
}
trap stop EXIT
trap 'exit 130' INT TERM

for _ in $(seq "$spinners"); do
  # A shell loop: pure CPU, no I/O, no memory.
  ( while :; do :; done ) &
  pids+=($!)
done
echo "busy: $spinners spinners on $(nproc) cores (pids ${pids[*]})" >&2

status=0
"$@" || status=$?
echo "busy: command exited $status" >&2
exit "$status"
