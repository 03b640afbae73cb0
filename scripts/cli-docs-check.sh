#!/usr/bin/env bash
# The CLI's generated docs: `revenant completions` and `revenant man`.
#
# - completions for bash, zsh and fish are generated and parsed by their own shell
#   (`bash -n`, `zsh -n`, `fish --no-execute`);
# - the man pages are generated, every subcommand (walked through `--help`, at every
#   depth) must have its page, and every page must render without a warning
#   (`groff -man -Tutf8 -ww -z`).
#
# zsh, fish and groff are installed with apt-get when missing under CI=true (as
# scripts/browser-test.sh installs chromium); elsewhere a missing zsh or fish is
# skipped with a note, and a missing groff is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "cli-docs-check: $*" >&2; }
die() { say "FAILED: $*"; exit 1; }

# --- Tools ------------------------------------------------------------------------
missing=()
command -v zsh >/dev/null || missing+=(zsh)
command -v fish >/dev/null || missing+=(fish)
command -v groff >/dev/null || missing+=(groff-base)
if [ "${#missing[@]}" -gt 0 ] && [ "${CI:-}" = true ]; then
  say "installing ${missing[*]} with apt-get"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  $sudo apt-get update -qq >&2 || die "apt-get update failed; cannot install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2 \
    || die "apt-get install ${missing[*]} failed"
fi
command -v groff >/dev/null || die "groff is needed to check the man pages (apt-get install groff-base)"

say "building revenant"
cargo build -p revenant-cli --locked --quiet >&2 || die "cargo build -p revenant-cli failed"
bin=$(pwd)/target/debug/revenant
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- Completions ------------------------------------------------------------------
for shell in bash zsh fish; do
  script=$work/revenant.$shell
  "$bin" completions "$shell" >"$script" || die "revenant completions $shell failed"
  [ -s "$script" ] || die "revenant completions $shell printed nothing"
  if ! command -v "$shell" >/dev/null; then
    [ "${CI:-}" = true ] && die "$shell is missing"
    say "$shell is not installed: its script is generated ($(wc -c <"$script") bytes) but not parsed (apt-get install $shell)"
    continue
  fi
  case $shell in
    bash) bash -n "$script" ;;
    zsh) zsh -n "$script" ;;
    fish) fish --no-execute "$script" ;;
  esac || die "$shell cannot parse the completions"
  say "$shell: $(wc -c <"$script") bytes, parsed by $shell"
done

# --- Man pages --------------------------------------------------------------------
"$bin" man --out "$work/man" >"$work/man.list" || die "revenant man failed"

# The subcommands under a command, from its --help ("Commands:" lists one per line,
# two spaces in; `help` is clap's own).
subcommands() {
  "$bin" "$@" --help | awk '
    /^Commands:/ { inside = 1; next }
    inside && /^[^ ]/ { inside = 0 }
    inside && /^  [a-z]/ { if ($1 != "help") print $1 }'
}
pages=0
walk() {
  local page=$work/man/$(IFS=-; echo "revenant${*:+-$*}").1
  [ -f "$page" ] || die "no man page for 'revenant $*' (expected $(basename "$page"))"
  local warnings
  warnings=$(groff -man -Tutf8 -ww -z "$page" 2>&1) || die "groff failed on $(basename "$page"): $warnings"
  [ -z "$warnings" ] || die "$(basename "$page") renders with warnings: $warnings"
  pages=$((pages + 1))
  local sub
  for sub in $(subcommands "$@"); do
    walk "$@" "$sub"
  done
}
walk
written=$(wc -l <"$work/man.list")
[ "$written" -eq "$pages" ] || die "revenant man wrote $written pages, the commands have $pages"
say "man: $pages pages, one per command, each rendered by groff without a warning"
