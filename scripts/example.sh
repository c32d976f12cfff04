#!/usr/bin/env bash
# Builds ropekit and runs the main job on a bundled example: `ropekit fuse` on a tiny Qwen3
# model exported by torch.onnx (dynamo), printing each RoPE site it fused and the node counts,
# then the C API example (tables, rotation, inverse, a rejected position id).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target ropekit_cli ropekit_example >/dev/null
echo "\$ ropekit fuse tests/fixtures/models/qwen3.onnx build/qwen3_fused.onnx"
./build/ropekit fuse tests/fixtures/models/qwen3.onnx build/qwen3_fused.onnx
echo
echo "\$ build/ropekit_example"
./build/ropekit_example
