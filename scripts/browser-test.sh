#!/usr/bin/env bash
# The dashboard's browser test: a real headless Chromium drives the dashboard of a real
# `revenant serve` on a temporary SQLite database. It finds a dead job, redrives it,
# and sees it complete (crates/revenant-server/tests/browser/dashboard.test.mjs).
#
# Needs Node.js 20+ with npm, and Debian's chromium. A missing chromium is installed
# with apt-get when this runs as root or under CI; otherwise the script says how and
# fails. It never skips: under CI=true a missing browser is a failure.
#
# Screenshots of each step go to target/browser-test/ (SCREENSHOT_DIR to change it).
# Everything stops by itself: each step has a deadline, the whole test a timeout, and
# the server is killed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
browser_dir=crates/revenant-server/tests/browser
shots=${SCREENSHOT_DIR:-$repo/target/browser-test}

say() { echo "browser-test: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

# --- Chromium ---------------------------------------------------------------------
chromium_bin=${CHROMIUM:-}
if [ -z "$chromium_bin" ]; then
  chromium_bin=$(command -v chromium || command -v chromium-browser || true)
fi
if [ -z "$chromium_bin" ]; then
  if [ "$(id -u)" = 0 ] || [ "${CI:-}" = true ]; then
    say "chromium is missing; installing Debian's chromium"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    $sudo apt-get update -qq >&2 || die "apt-get update failed; cannot install chromium"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >&2 \
      || die "apt-get install chromium failed"
    chromium_bin=$(command -v chromium || true)
  fi
fi
[ -n "$chromium_bin" ] && [ -x "$chromium_bin" ] \
  || die "Chromium not found. Install Debian's chromium (sudo apt-get install -y chromium) or set CHROMIUM=/path/to/chromium."
say "browser: $("$chromium_bin" --version 2>/dev/null | head -n1)"

# --- Node -------------------------------------------------------------------------
command -v node >/dev/null && command -v npm >/dev/null \
  || die "node and npm are needed (Node.js 20 or later)."
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "Node.js 20 or later is needed (found $(node --version))."
(cd "$browser_dir" && npm ci --no-audit --no-fund --loglevel=error >&2) || die "npm ci failed in $browser_dir"

# --- The server -------------------------------------------------------------------
say "building revenant"
cargo build -p revenant-cli --locked --quiet >&2 || die "cargo build -p revenant-cli failed"
bin=$repo/target/debug/revenant

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

token=$(node -e 'console.log(require("crypto").randomBytes(24).toString("hex"))')
# Alert rules, so the overview has one to show: the test queue is critical (one dead
# job fires), nothing else is checked.
cat >"$work/alerts.toml" <<'TOML'
[queues.browser-test]
critical = true
TOML

# Port 0: the server picks a free port and prints the address it listens on.
export REVENANT_DATABASE_URL="sqlite://$work/revenant.db"
REVENANT_TOKENS="browser-test:admin:$token" "$bin" serve --listen 127.0.0.1:0 --alerts "$work/alerts.toml" \
  >"$work/server.log" 2>&1 &
server_pid=$!

# Ready when it has printed its address and /readyz answers; give up after 30 s.
url=""
for _ in $(seq 1 300); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$work/server.log" >&2
    die "revenant serve exited before it was ready"
  fi
  if [ -z "$url" ]; then
    url=$(grep -o 'listening on http://[0-9.:]*' "$work/server.log" | head -n1 | sed 's/^listening on //' || true)
  fi
  if [ -n "$url" ] && node -e 'fetch(process.argv[1]).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))' "$url/readyz" 2>/dev/null; then
    break
  fi
  sleep 0.1
done
node -e 'fetch(process.argv[1]).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))' "$url/readyz" 2>/dev/null \
  || { cat "$work/server.log" >&2; die "revenant serve did not become ready within 30 s"; }
say "server: $url (database $REVENANT_DATABASE_URL)"

# --- The test ---------------------------------------------------------------------
mkdir -p "$shots"
rm -f "$shots"/dashboard-*.png
status=0
(
  cd "$browser_dir"
  REVENANT_URL="$url" REVENANT_TOKEN="$token" CHROMIUM="$chromium_bin" SCREENSHOT_DIR="$shots" \
    timeout 180 node --test --test-timeout=150000 --test-reporter=spec dashboard.test.mjs
) || status=$?

if [ "$status" -ne 0 ]; then
  say "server log (last 40 lines):"
  tail -n 40 "$work/server.log" >&2 || true
  die "the browser test failed (exit $status); screenshots so far are in $shots"
fi
say "screenshots: $shots"
ls -1 "$shots"/dashboard-*.png >&2
