#!/bin/bash
# Device side of a round: bash .dev/stage/run_round.sh "b1:seconds b2:seconds ..."
set -u
root=$PWD
mkdir -p "$OUT" .dev/rounds
{ date; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv;
  lscpu | grep -E '^(CPU\(s\)|Model name|Flags)'; } > "$OUT/machine.txt" 2>&1
for spec in $1; do
  b=${spec%%:*}; share=${spec##*:}
  rm -rf ".dev/rounds/$b"; mkdir -p ".dev/rounds/$b" "/tmp/rout/$b"
  tar -C ".dev/rounds/$b" -xJf ".dev/stage/$b.tar.xz"
  t0=$(date +%s)
  ( cd "$root" && SHARE=$share OUT=/tmp/rout/$b timeout "$share" bash ".dev/rounds/$b/round.sh" ) \
      > "/tmp/rout/$b/round.log" 2>&1
  rc=$?
  echo "$b rc=$rc $(( $(date +%s) - t0 ))s of $share" | tee -a "$OUT/rounds.txt"
  tar -C "/tmp/rout/$b" -czf "$OUT/$b.tgz" .
done
