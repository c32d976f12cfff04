#!/usr/bin/env bash
# Runs every test: the C tests in a release build and in an ASan/UBSan build, then the Python
# conformance suite (onnx reference, onnxruntime, float64 oracles, transformers fixtures).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --python
jobs="$(nproc)"

echo "== release build + C tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" >/dev/null
ctest --test-dir build --output-on-failure

echo "== ASan/UBSan build + C tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DROPEKIT_SANITIZE=ON -DCMAKE_C_COMPILER=clang >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
ctest --test-dir build-asan --output-on-failure

echo "== Python conformance suite"
ROPEKIT_LIB="$PWD/build/libropekit.so" .venv/bin/python -m pytest -q tests/python
