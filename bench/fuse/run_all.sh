#!/usr/bin/env bash
# bench/fuse: scale and comparison benchmarks for `ropekit fuse` (results in bench/results-fuse.md).
#
#   bench/fuse/run_all.sh            # everything (~15 min on a 2-core machine, ~6 GB RAM, ~2.1 GB disk)
#
# Needs: build/ropekit (cmake -S . -B build && cmake --build build -j2), .venv with numpy, onnx,
# onnxruntime; /usr/bin/time (Debian package `time`). Work files go to $ROPEKIT_BENCH_DIR
# (default /tmp/ropekit_bench), never into the repository. JSON results: $ROPEKIT_BENCH_DIR/*.json.
#   1. make_synthetic_qwen3.py   synthetic Qwen3-0.6B-sized model, external data (skipped if present)
#   2. bench_fuse_cli.py         ropekit fuse wall time / peak RSS / 56 nodes / parity on it
#   3. bench_ort_latency.py      ORT CPU latency original vs fused (dynamo fixtures + full size)
#   4. bench_ort_optimizer.py    onnxruntime.transformers.optimizer vs ropekit fuse, RotaryEmbedding counts
#   5. ort_profile.py            per-op-type ORT profile of the full-size model (where the time goes)
#   6. tables.py                 the markdown tables of bench/results-fuse.md -> $W/tables.md
set -euo pipefail
cd "$(dirname "$0")"
PY=${PY:-../../.venv/bin/python}
W=${ROPEKIT_BENCH_DIR:-/tmp/ropekit_bench}
mkdir -p "$W"
export ROPEKIT_CLI=${ROPEKIT_CLI:-$PWD/../../build/ropekit}   # pin a copy: others rebuild build/ while this runs
echo "ropekit CLI: $ROPEKIT_CLI ($(sha256sum "$ROPEKIT_CLI" | cut -c1-16)); HEAD $(git -C ../.. rev-parse HEAD)"
log() { echo "== $(date -u +%H:%M:%S) load: $(cut -d' ' -f1-3 /proc/loadavg) :: $*"; }
if [ ! -f "$W/qwen3_full/model.onnx.data" ]; then
  log make_synthetic_qwen3
  "$PY" make_synthetic_qwen3.py --out "$W/qwen3_full" --check
fi
log bench_fuse_cli;      "$PY" bench_fuse_cli.py --json "$W/fuse_cli.json"
log bench_ort_latency;   "$PY" bench_ort_latency.py --json "$W/latency.json"
log bench_ort_optimizer; "${PY_ORTOPT:-/work/venvs/torch/bin/python}" bench_ort_optimizer.py --json "$W/optimizer.json"
log ort_profile;         "$PY" ort_profile.py --threads 1 --json "$W/profile_t1.json"
log ort_profile;         "$PY" ort_profile.py --threads 2 --json "$W/profile_t2.json"
log ort_profile;         "$PY" ort_profile.py --threads 1 --S 1 --runs 20 --json "$W/profile_decode_t1.json"
log tables;              "$PY" tables.py > "$W/tables.md"
log done
