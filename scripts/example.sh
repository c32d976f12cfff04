#!/usr/bin/env bash
# Builds ropekit and runs the main job on a bundled example: `ropekit fuse` on a tiny Qwen3
# model exported by torch.onnx (dynamo), printing each RoPE site it fused and the node counts,
# then the C API example (tables, rotation, inverse, a rejected position id).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
# build/ is shared with scripts/test.sh and your own builds. Configured before .venv (and its
# wgpu-native) exists, CMake would cache ROPEKIT_WEBGPU=OFF for good; so an OFF that is only the
# default is forgotten once the example is built, and the next configure decides again.
webgpu_was_set="$(grep -s '^ROPEKIT_WEBGPU:' build/CMakeCache.txt || true)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target ropekit_cli ropekit_example >/dev/null
[ -n "$webgpu_was_set" ] || sed -i '/^ROPEKIT_WEBGPU:BOOL=OFF$/d' build/CMakeCache.txt
echo "\$ ropekit fuse tests/fixtures/models/qwen3.onnx build/qwen3_fused.onnx"
./build/ropekit fuse tests/fixtures/models/qwen3.onnx build/qwen3_fused.onnx
echo
echo "\$ build/ropekit_example"
./build/ropekit_example
