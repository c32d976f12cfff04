#!/usr/bin/env bash
# fi_pack.sh: fills the coordinator's device folder for fi_round.sh (session 7, helper c-fi).
# Usage: bench/cuda/rounds/fi_pack.sh DEST [ROPEKIT_BUILD (default build-cuda)] [FI_OUT (default build-fi)]
# after `cmake --build build-cuda --target ropekit_cuda bench_cuda` and bench/cuda/build_flashinfer.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
DEST=$1; B=${2:-$ROOT/build-cuda}; F=${3:-$ROOT/build-fi}
rm -rf "$DEST/bin" "$DEST/lib"; mkdir -p "$DEST/bin" "$DEST/lib"
cp "$F/bench_flashinfer" "$B/bench_cuda" "$DEST/bin/"
for l in libropekit_cuda libropekit; do cp -L "$B/$l.so.0" "$DEST/lib/$l.so.0"; done
strip "$DEST"/bin/* "$DEST"/lib/*
cp "$F/flashinfer-version.txt" "$DEST/"
cp "$ROOT/bench/cuda/rounds/fi_round.sh" "$DEST/round.sh"
( cd "$ROOT" && echo "ropekit commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include || echo ' (+ uncommitted src changes)')" ) >"$DEST/commit.txt"
du -sh "$DEST"; tar cJf - -C "$DEST" . | wc -c
