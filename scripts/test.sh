#!/usr/bin/env bash
# Runs every test: the C tests in a release build and in an ASan/UBSan build, then the Python
# conformance suite (onnx reference, onnxruntime, float64 oracles, transformers fixtures).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --python
jobs="$(nproc)"

echo "== release build + C tests (WebGPU on Mesa lavapipe and llvmpipe: webgpu_vulkan, webgpu_gl)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" >/dev/null
# a missing software adapter must fail the WebGPU tests, not skip them
ROPEKIT_WEBGPU_REQUIRE=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" ctest --test-dir build --output-on-failure

# ---- browser suite (owned by the WebGPU backend): the kernel packages (build/webgpu-packages)
# through js/ropekit-webgpu.js in Debian's chromium headless (SwiftShader WebGPU, no shader-f16,
# no f64), one browser start, every shared case of every operator bit for bit
echo "== browser: WebGPU kernel packages + js/ropekit-webgpu.js in chromium headless"
.venv/bin/python tests/browser/run_browser_tests.py --packages build/webgpu-packages

# ---- CUDA backend (owned by the CUDA backend): compile only, warnings as errors -------------
if command -v nvcc >/dev/null 2>&1; then
  echo "== CUDA library, check and benchmark programs: compile only (they run on a GPU machine)"
  cmake -S . -B build -DROPEKIT_CUDA=ON >/dev/null
  cmake --build build -j"$jobs" --target ropekit_cuda check_cuda bench_cuda >/dev/null
fi

echo "== install, then build a program against it (CMake package and pkg-config)"
prefix="$(mktemp -d)"
cmake --install build --prefix "$prefix" >/dev/null
cmake -S tests/install -B "$prefix/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer/c"
cc tests/install/main.c $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs ropekit) -o "$prefix/c2"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/c2"
rm -rf "$prefix"

if [ "$(uname -m)" = x86_64 ]; then
  echo "== AArch64 (NEON variant): C tests cross-compiled, run under qemu-user"
  core="src/core/status.c src/core/float16.c src/core/validate.c src/core/tables.c src/core/on_the_fly.c
        src/cpu/ref.c src/cpu/dispatch.c src/cpu/neon.c"
  for t in test_api test_float16 test_variants; do
    # shellcheck disable=SC2086
    aarch64-linux-gnu-gcc -O2 -std=c11 -ffp-contract=off -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L \
      -Iinclude -Isrc/core -static $core "tests/$t.c" -o "build/${t}_aarch64" -lm -lpthread
    out="$(qemu-aarch64 "build/${t}_aarch64")" # a failing test stops the script here (set -e)
    echo "$t (aarch64): ${out##*$'\n'}"
  done
fi

echo "== ASan/UBSan build + C tests (WebGPU included: ropekit's code instrumented, wgpu-native and Mesa not)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DROPEKIT_SANITIZE=ON -DCMAKE_C_COMPILER=clang \
  >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
ROPEKIT_WEBGPU_REQUIRE=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}" ctest --test-dir build-asan --output-on-failure

# ---- fuzz smoke (owned by the ONNX layer): the libFuzzer harness on its corpus ------------
# Deterministic (fixed seed and run count), so a CI result can be reproduced; long exploratory
# runs are for developers (fuzz/README.md).
echo "== fuzz smoke: fuzz_load, ${ROPEKIT_FUZZ_RUNS:-60000} runs from the corpus, seed 1"
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang -DROPEKIT_FUZZ=ON \
  -DROPEKIT_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz_load >/dev/null
fuzz_corpus="$(mktemp -d)"
cp fuzz/corpus/* "$fuzz_corpus"/
fuzz_rc=0
build-fuzz/fuzz/fuzz_load -max_len=65536 -timeout=10 -seed=1 -runs="${ROPEKIT_FUZZ_RUNS:-60000}" \
  -artifact_prefix=build-fuzz/ -print_final_stats=1 "$fuzz_corpus" >build-fuzz/fuzz.log 2>&1 || fuzz_rc=$?
rm -rf "$fuzz_corpus"
grep -E '^(Done|stat::peak_rss_mb)' build-fuzz/fuzz.log || true
if [ "$fuzz_rc" -ne 0 ]; then
  tail -n 40 build-fuzz/fuzz.log
  echo "fuzz smoke FAILED: the input is in build-fuzz/ (crash-*, timeout-*, oom-*)"
  exit 1
fi

echo "== Python conformance suite"
ROPEKIT_LIB="$PWD/build/libropekit.so" .venv/bin/python -m pytest -q tests/python
