#!/bin/bash
# Pack every READY helper folder for the next device round (see README.md).
set -eu
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
src=${ROUNDS:-/work/notes/device/rounds}
stage=$repo/.dev/stage
rm -rf "$stage"; mkdir -p "$stage"
grep -qx '/.dev/' "$repo/.git/info/exclude" 2>/dev/null || echo '/.dev/' >> "$repo/.git/info/exclude"
cp "$repo/bench/device/run_round.sh" "$stage/"
for d in "$src"/*/; do
  b=$(basename "$d")
  [ -f "$d/READY" ] || { echo "skip $b (not READY)"; continue; }
  tar -C "$d" --exclude=READY -cJf "$stage/$b.tar.xz" .
  echo "$b $(du -k "$stage/$b.tar.xz" | cut -f1) KiB"
done
du -sh "$stage"
