#!/bin/bash
# Unpack a round's returned archives: unpack.sh R<n> FILES_AT
set -eu
r=$1; at=$2; dst=${ROUNDS_OUT:-/work/notes/device}/$r
mkdir -p "$dst"
cp "$at"/rounds.txt "$at"/machine.txt "$dst/" 2>/dev/null || true
for f in "$at"/*.tgz; do
  b=$(basename "$f" .tgz); mkdir -p "$dst/$b"; tar -C "$dst/$b" -xzf "$f"; touch "$dst/$b/DONE"
done
ls "$dst"
