#!/usr/bin/env bash
# Fill the device-round folder (session c-rot): pack.sh ROUND_SCRIPT BUILD_DIR BASE_LIB_DIR [DEST]
# bin/ check_cuda, bench_cuda; lib/ libropekit_cuda.so.0 + libropekit.so.0 of BUILD_DIR;
# lib-base/ the A/B base's libropekit_cuda.so.0 (all stripped, plain files: the coordinator
# xz-packs the folder, which must stay under 2.5 MiB after xz; build with
# CMAKE_CUDA_ARCHITECTURES=90-real, SASS only); the bench scripts; ROUND_SCRIPT as round.sh.
set -eu
R=$1 BLD=$2 BASE=$3 DST=${4:-/work/main/.dev/rounds/c-rot}
S=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$DST"/bin "$DST"/lib "$DST"/lib-base "$DST"/bins.tgz
mkdir -p "$DST"/bin "$DST"/lib "$DST"/lib-base
cp "$BLD"/check_cuda "$BLD"/bench_cuda "$DST"/bin/
cp -L "$BLD"/libropekit_cuda.so.0 "$BLD"/libropekit.so.0 "$DST"/lib/
cp -L "$BASE"/libropekit_cuda.so.0 "$DST"/lib-base/
strip --strip-unneeded "$DST"/bin/* "$DST"/lib/* "$DST"/lib-base/*
cp "$S"/ab_summary.py "$S"/bench_torch.py "$S"/torch_timing.py "$S"/rounds/table.py "$S"/rounds/triton_probe.py "$DST"/
cp "$R" "$DST"/round.sh
du -sh "$DST"
echo "xz -6 of the folder: $(tar cf - -C "$DST" . | xz -6 | wc -c) bytes"
