#!/usr/bin/env bash
# Would `cargo publish` accept every crate? Packages the workspace's publishable crates
# together (cargo resolves the ones not yet on the registry from the local packages) and
# stops before the upload. It fails on what the registry would refuse: missing metadata,
# a path dependency without a version, a dependency on an unpublished crate, and (in the
# verify build) a file a crate needs that lies outside its directory (an include_str!
# of ../../docs, say).
#
#   scripts/publish-check.sh               # what CI runs: package, then build every
#                                          # package from its .crate, as `cargo publish`
#                                          # does
#   scripts/publish-check.sh --no-verify   # package only: the metadata and file lists
#
# Figures on the project's 2-core machine, shared with two other builds: the verify
# took 222 s cold (every dependency built once, into target/debug) and 23 s warm (the
# nine crates again); --no-verify takes 10 to 30 s, mostly reading the registry's index.
#
# Reads the registry's index to resolve dependency versions (a network call).
# `--allow-dirty`: CI runs it on the tree it is given, committed or not.
set -euo pipefail
cd "$(dirname "$0")/.."

verify=()
case "${1:-}" in
  --no-verify) verify=(--no-verify) ;;
  "") ;;
  *) echo "usage: $0 [--no-verify]" >&2; exit 2 ;;
esac

# cargo unpacks the packages of its temporary registry (target/package/tmp-registry)
# into the cargo home, in a directory named for that registry's path, and builds from
# an unpacked copy it finds there without unpacking again: a second check from a clone
# at the same path built the first one's sources (a function added to revenant-core
# was missing from the revenant-postgres verify build). Such a directory holds nothing
# but this workspace's crates; it is removed first. The registry's own directories
# (crates.io's) hold other crates and are left alone.
home="${CARGO_HOME:-$HOME/.cargo}"
for unpacked in "$home"/registry/src/*/; do
  [ -d "$unpacked" ] || continue
  if [ -z "$(find "$unpacked" -mindepth 1 -maxdepth 1 ! -name 'revenant-*' -print -quit)" ]; then
    rm -rf "$unpacked"
  fi
done

cargo publish --workspace --dry-run --allow-dirty --locked "${verify[@]}"
