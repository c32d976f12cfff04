#!/bin/bash
# Build the final-check folder: build_final.sh BASE_COMMIT [FINAL_COMMIT=main]
# Worktrees /work/base and /work/final, Release, sm_90 SASS, stripped; the folder is
# /work/notes/device/rounds/final (round.sh = bench/device/final_round.sh).
set -eu
base=$1; fin=${2:-main}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
dst=${ROUNDS:-/work/notes/device/rounds}/final
build() { # worktree commit targets...
  local wt=$1 c=$2; shift 2
  [ -d "$wt" ] || git -C "$repo" worktree add --detach "$wt" "$c"
  git -C "$wt" checkout -q --detach "$c"
  cmake -S "$wt" -B "$wt/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES=90-real >/dev/null
  nice -n 5 ninja -C "$wt/build" "$@"
}
build /work/base "$base" libropekit.so libropekit_cuda.so
build /work/final "$fin" libropekit.so libropekit_cuda.so check_cuda bench_cuda test_variants test_threads ropekit_bench_ab ropekit_bench
rm -rf "$dst"; mkdir -p "$dst/bin" "$dst/lib" "$dst/lib-base"
F=/work/final/build
for t in check_cuda bench_cuda test_variants test_threads ropekit_bench_ab ropekit_bench; do
  cp "$(find $F -name $t -type f -perm -u+x | head -1)" "$dst/bin/"
done
for l in libropekit.so.0 libropekit_cuda.so.0; do   # by soname: what the loader looks for
  cp -L "$F/$l" "$dst/lib/"; cp -L "/work/base/build/$l" "$dst/lib-base/"
done
# optional: EXTRA_LIB=name=path/libropekit.so.0 (a third CPU build for the A/B), MODELS=dir (the
# one-node models bench_ort.py --models writes; then the final round runs the CPU tables)
if [ -n "${EXTRA_LIB:-}" ]; then mkdir -p "$dst/lib-extra"; cp -L "${EXTRA_LIB#*=}" "$dst/lib-extra/libropekit.so.0"; echo "${EXTRA_LIB%%=*}" > "$dst/EXTRA"; fi
if [ -n "${MODELS:-}" ]; then cp -r "$MODELS" "$dst/models"; fi
strip "$dst"/bin/* "$dst"/lib*/* 2>/dev/null || true
cp "$repo/bench/cuda/ab_summary.py" "$repo/bench/device/final_round.sh" "$dst/"
cp "$dst/final_round.sh" "$dst/round.sh"
git -C /work/final rev-parse HEAD > "$dst/FINAL"; git -C /work/base rev-parse HEAD > "$dst/BASE"
echo 150 > "$dst/SHARE"; touch "$dst/READY"; ls -la "$dst" "$dst/bin" "$dst/lib" "$dst/lib-base"
