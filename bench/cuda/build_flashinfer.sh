#!/usr/bin/env bash
# build_flashinfer.sh: brings FlashInfer (the CUDA peer of bench/results-cuda.md, section
# "FlashInfer (peer)") and builds bench_flashinfer. Nothing of FlashInfer is in this repository:
#   1. downloads the flashinfer-python wheel (pinned: FI_VERSION, default 0.7.4) from PyPI with
#      `pip download --no-deps` (the wheel is ~100 MB: mostly sources for its JIT),
#   2. unpacks only its headers (flashinfer/data/include/flashinfer and the vendored CCCL it
#      compiles against),
#   3. compiles bench/cuda/fi_rope.cu (FlashInfer's pos_enc.cuh behind a C entry point) with the
#      flags FlashInfer's JIT gives its rope module (flashinfer/jit/core.py, cpp_ext.py) for the
#      H200 (compute_90a -> sm_90a, what the JIT picks on an sm_90 GPU),
#   4. links bench/cuda/bench_flashinfer.cu with it and with libropekit_cuda / libropekit of
#      ROPEKIT_BUILD (a CMake build of this repository with CUDA, e.g.
#      `cmake -G Ninja -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90-real`).
# Usage: bench/cuda/build_flashinfer.sh [ROPEKIT_BUILD (default build-cuda)] [OUT (default build-fi)]
# Result: OUT/bench_flashinfer (run it with ROPEKIT_BUILD's libraries on LD_LIBRARY_PATH; it has
# an $ORIGIN rpath, so copies of the .so files beside it also do); OUT/flashinfer-version.txt.
# Links the shared CUDA runtime (as CMake links bench_cuda). Needs nvcc (CUDA 12.8 or newer), unzip, pip; network to PyPI only for the download (the wheel
# is kept in OUT/wheel and reused).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build-cuda}" && pwd)
OUT=${2:-$ROOT/build-fi}
FI_VERSION=${FI_VERSION:-0.7.4}
PIP=${PIP:-python3 -m pip}
NVCC=${NVCC:-nvcc}
mkdir -p "$OUT/wheel"
OUT=$(cd "$OUT" && pwd)
WHL=$OUT/wheel/flashinfer_python-$FI_VERSION-py3-none-any.whl
[ -f "$WHL" ] || $PIP download --no-deps --only-binary :all: "flashinfer-python==$FI_VERSION" -d "$OUT/wheel"
rm -rf "$OUT/src" && mkdir -p "$OUT/src"
unzip -q -o "$WHL" 'flashinfer/data/include/flashinfer/*' 'flashinfer/data/cccl/*' \
  "flashinfer_python-$FI_VERSION.dist-info/METADATA" -d "$OUT/src"
D=$OUT/src/flashinfer/data
{ echo "flashinfer-python $(sed -n 's/^Version: //p' "$OUT/src/flashinfer_python-$FI_VERSION.dist-info/METADATA")"
  echo "wheel sha256 $(sha256sum "$WHL" | cut -d' ' -f1)"
  "$NVCC" --version | tail -1; } > "$OUT/flashinfer-version.txt"
# FlashInfer's JIT flags for its rope module (non-debug build), then its include order
FI_FLAGS=(-std=c++17 -use_fast_math -DFLASHINFER_ENABLE_F16 -DFLASHINFER_ENABLE_BF16
  -DFLASHINFER_ENABLE_FP8_E4M3 -DFLASHINFER_ENABLE_FP8_E5M2 -DNDEBUG -O3 --expt-relaxed-constexpr
  -static-global-template-stub=false -gencode=arch=compute_90a,code=sm_90a
  "-I$D/cccl/cub" "-I$D/cccl/libcudacxx/include" "-I$D/cccl/thrust" "-I$D/include")
"$NVCC" "${FI_FLAGS[@]}" -I"$ROOT/bench/cuda" -c "$ROOT/bench/cuda/fi_rope.cu" -o "$OUT/fi_rope.o"
# the bench program itself: this repository's flags (no fast math), sm_90
"$NVCC" -std=c++17 -O3 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Werror -I"$ROOT/include" -I"$ROOT/bench/cuda" \
  "$ROOT/bench/cuda/bench_flashinfer.cu" "$OUT/fi_rope.o" -o "$OUT/bench_flashinfer" \
  -cudart shared -L"$BUILD" -lropekit_cuda -lropekit -Xlinker -rpath,'$ORIGIN'
echo "built $OUT/bench_flashinfer ($(cat "$OUT/flashinfer-version.txt" | head -1))"
