#!/usr/bin/env bash
# Fill the device-round folder (session c-rot): pack.sh ROUND_SCRIPT BUILD_DIR BASE_LIB_DIR [DEST]
# bin/ check_cuda, bench_cuda; lib/ libropekit_cuda.so.0 + libropekit.so.0 of BUILD_DIR;
# lib-base/ the A/B base's libropekit_cuda.so.0, all three in bins.tgz (the folder must stay
# under 6 MiB; round.sh unpacks it); the bench scripts; ROUND_SCRIPT as round.sh.
set -eu
R=$1 BLD=$2 BASE=$3 DST=${4:-/work/main/.dev/rounds/c-rot}
S=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d); mkdir -p $T/bin $T/lib $T/lib-base
cp "$BLD"/check_cuda "$BLD"/bench_cuda $T/bin/
cp -L "$BLD"/libropekit_cuda.so.0 "$BLD"/libropekit.so.0 $T/lib/
cp -L "$BASE"/libropekit_cuda.so.0 $T/lib-base/
rm -rf "$DST"/bin "$DST"/lib "$DST"/lib-base
tar czf "$DST"/bins.tgz -C $T bin lib lib-base; rm -rf $T
cp "$S"/ab_summary.py "$S"/bench_torch.py "$S"/torch_timing.py "$DST"/
cp "$R" "$DST"/round.sh
du -sh "$DST"
