#!/usr/bin/env bash
# Runs every test: the C tests in a release build and in an ASan/UBSan build, then the Python
# conformance suite (onnx reference, onnxruntime, float64 oracles, transformers fixtures).
# Progress: each stage line shows the time since the start, ctest a line per test, and the
# WebGPU tests stream their own progress. No backend is left out silently: the WebGPU backend
# is configured ON (CMake fails when wgpu-native is missing) and its tests must be there.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --python
jobs="$(nproc)"
stage() { printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# ctest in build dir $1: the WebGPU tests stream their output (ctest -V minus ctest's own
# chatter), the others print a line each and their output on failure. ROPEKIT_WEBGPU_REQUIRE=1:
# a missing software adapter fails the WebGPU tests instead of skipping them. The two WebGPU
# tests (lavapipe, llvmpipe) run at the same time (ctest -j2; ctest puts the test's number in
# front of each of its lines): each is one process that mostly compiles shaders on one core.
ctest_chatter='^$|^(UpdateCTestConfiguration|Constructing a list|Done constructing|Updating test list'
ctest_chatter+='|Added 0 tests|Checking test dependency|test [0-9]+$|[0-9]+: (Test command|Working Dir'
ctest_chatter+='|Environment variables|Test timeout| +[A-Z_]+=))'
run_ctest() {
  local dir=$1 t
  for t in webgpu_vulkan webgpu_gl; do # the tests every build must have
    ctest --test-dir "$dir" -N -R "^$t\$" | grep -q '^Total Tests: 1$' ||
      { echo "test.sh: FAILED: $dir has no test $t (the WebGPU backend was left out)"; exit 1; }
  done
  local -x ROPEKIT_WEBGPU_REQUIRE=1 XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
  ctest --test-dir "$dir" --output-on-failure -E '^webgpu_'
  ctest --test-dir "$dir" -V -j2 -R '^webgpu_' | grep --line-buffered -vE "$ctest_chatter"
}

stage "release build + C tests (WebGPU on Mesa lavapipe and llvmpipe: webgpu_vulkan, webgpu_gl)"
# ROPEKIT_WEBGPU=ON: a build/ configured before .venv existed (scripts/example.sh) cached OFF
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DROPEKIT_WEBGPU=ON >/dev/null
cmake --build build -j"$jobs" >/dev/null
# WebGPU: every shared case of every operator in each configuration on lavapipe (Vulkan); on
# llvmpipe (OpenGL ES) a deterministic quarter per configuration, each case in one of four
# (tests/webgpu/test_webgpu.c: ROPEKIT_WEBGPU_SAMPLE), so every case runs there too, once
ROPEKIT_WEBGPU_SAMPLE=gl:4 run_ctest build

# ---- browser suite (owned by the WebGPU backend): the kernel packages (build/webgpu-packages)
# through js/ropekit-webgpu.js in Debian's chromium headless (SwiftShader WebGPU, no shader-f16,
# no f64), one browser start, every shared case of every operator bit for bit
stage "browser: WebGPU kernel packages + js/ropekit-webgpu.js in chromium headless"
.venv/bin/python tests/browser/run_browser_tests.py --packages build/webgpu-packages

# ---- CUDA backend (owned by the CUDA backend): compile only, warnings as errors -------------
if command -v nvcc >/dev/null 2>&1; then
  stage "CUDA library, check and benchmark programs: compile only (they run on a GPU machine)"
  cmake -S . -B build -DROPEKIT_CUDA=ON >/dev/null
  cmake --build build -j"$jobs" --target ropekit_cuda check_cuda bench_cuda >/dev/null
else
  stage "CUDA: NOT compiled (no nvcc on this machine)"
fi

# ---- onnxruntime custom-op library (owned by src/ort): built from the packaged header ------
stage "libropekit_ort (onnxruntime custom ops; tests/python/test_ort_custom_ops.py runs it)"
test -f build/libropekit_ort.so || { echo "libropekit_ort was not built (no onnxruntime_c_api.h?)"; exit 1; }
syms="$(nm -D --defined-only build/libropekit_ort.so | awk '{print $3}')"
[ "$syms" = RegisterCustomOps ] || { echo "libropekit_ort exports more than RegisterCustomOps: $syms"; exit 1; }
if command -v nvcc >/dev/null 2>&1; then
  cmake --build build -j"$jobs" --target ropekit_ort_cuda >/dev/null # compile only
fi

stage "install, then build a program against it (CMake package and pkg-config)"
prefix="$(mktemp -d)"
cmake --install build --prefix "$prefix" >/dev/null
cmake -S tests/install -B "$prefix/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer/c"
cc tests/install/main.c $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs ropekit) -o "$prefix/c2"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/c2"
rm -rf "$prefix"

if [ "$(uname -m)" = x86_64 ]; then
  stage "AArch64 (NEON variant): C tests cross-compiled, run under qemu-user"
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

stage "ASan/UBSan build + C tests (WebGPU included: ropekit's code instrumented, wgpu-native and Mesa not)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DROPEKIT_SANITIZE=ON -DCMAKE_C_COMPILER=clang \
  -DROPEKIT_WEBGPU=ON >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
# WebGPU under ASan: a deterministic quarter of the shared cases per configuration, each case in
# one of the four (tests/webgpu/test_webgpu.c), on both adapters; the release run above ran every
# case in every configuration on lavapipe
ROPEKIT_WEBGPU_SAMPLE=4 run_ctest build-asan

# ---- fuzz smoke (owned by the ONNX layer): the libFuzzer harness on its corpus ------------
# Deterministic (fixed seed and run count), so a CI result can be reproduced; long exploratory
# runs are for developers (fuzz/README.md).
stage "fuzz smoke: fuzz_load, ${ROPEKIT_FUZZ_RUNS:-60000} runs from the corpus, seed 1"
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

# ---- Python package (owned by packaging): the wheel, installed into a fresh venv -------------
# `pip wheel .` (scikit-build-core over this CMake project, the system cmake; CUDA left out to save
# CI time), installed into a new venv that sees no checkout; the Python suite, the fusion example
# and a C program built against the wheel's CMake package and pkg-config file then run on it. The
# test packages come from .venv through a .pth file, so nothing is downloaded here.
stage "Python package: pip wheel, installed into a fresh venv; Python suite against the installed package"
pkg="$(mktemp -d)"
.venv/bin/python -m pip wheel . -q --no-deps --no-build-isolation --disable-pip-version-check -w "$pkg/dist" \
  -Ccmake.define.ROPEKIT_CUDA=OFF -Cbuild-dir="$pkg/build"
python3 -m venv "$pkg/venv"
.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
  >"$("$pkg/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ropekit-test-deps.pth"
"$pkg/venv/bin/python" -m pip install -q --no-index --disable-pip-version-check "$pkg"/dist/ropekit-*.whl
site="$("$pkg/venv/bin/python" -c 'import ropekit, os; print(os.path.dirname(ropekit.__file__))')"
case "$site" in "$PWD"/*) echo "the installed ropekit resolves to the checkout: $site"; exit 1 ;; esac
(cd "$pkg" && env -u ROPEKIT_LIB ROPEKIT_TEST_INSTALLED=1 ROPEKIT_CLI="$pkg/venv/bin/ropekit" PATH="$pkg/venv/bin:$PATH" \
  "$pkg/venv/bin/python" -m pytest -q -p no:cacheprovider "$OLDPWD/tests/python")
(cd "$pkg" && env -u ROPEKIT_LIB "$pkg/venv/bin/python" "$OLDPWD/examples/fuse_and_run.py" | tail -n 2)
cmake -S examples/c_fuse -B "$pkg/c_fuse" -DCMAKE_PREFIX_PATH="$site" >/dev/null
cmake --build "$pkg/c_fuse" >/dev/null
"$pkg/c_fuse/fuse" tests/fixtures/models/llama.onnx "$pkg/llama_fused.onnx" | tail -n 1
cc examples/c_fuse/fuse.c $(PKG_CONFIG_PATH="$site/lib/pkgconfig" pkg-config --cflags --libs ropekit_onnx) -o "$pkg/fuse2"
LD_LIBRARY_PATH="$site/lib" "$pkg/fuse2" tests/fixtures/models/qwen3.onnx "$pkg/qwen3_fused.onnx" 64 | tail -n 1
rm -rf "$pkg"

stage "Python conformance suite"
ROPEKIT_LIB="$PWD/build/libropekit.so" .venv/bin/python -m pytest -q tests/python
stage "all tests passed"
