#!/usr/bin/env bash
# Builds ropekit and runs the bundled example (tables, rotation, inverse, a rejected position).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
./build/ropekit_example
