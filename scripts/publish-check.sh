#!/usr/bin/env bash
# Would `cargo publish` accept every crate? Packages the workspace's publishable crates
# together (cargo resolves the ones not yet on the registry from the local packages) and
# stops before the upload. It fails on what the registry would refuse: missing metadata,
# a path dependency without a version, a file a crate needs that lies outside its
# directory (an include_str! of ../../docs, say), a dependency on an unpublished crate.
#
#   scripts/publish-check.sh            # the CI form: package only (about half a minute)
#   scripts/publish-check.sh --verify   # also builds every package from its .crate, as
#                                       # `cargo publish` does (a cold build per crate:
#                                       # many minutes, so not in CI)
#
# Reads the registry's index to resolve dependency versions (a network call).
# `--allow-dirty`: CI runs it on the tree it is given, committed or not.
set -euo pipefail
cd "$(dirname "$0")/.."

verify=(--no-verify)
case "${1:-}" in
  --verify) verify=() ;;
  "") ;;
  *) echo "usage: $0 [--verify]" >&2; exit 2 ;;
esac

cargo publish --workspace --dry-run --allow-dirty --locked "${verify[@]}"
