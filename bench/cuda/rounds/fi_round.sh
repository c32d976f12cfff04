#!/usr/bin/env bash
# Device round of the FlashInfer peer (bench/results-cuda.md, "FlashInfer (peer)"), run as
# .dev/rounds/c-fi/round.sh under a 60 s share. Files (bench/cuda/rounds/fi_pack.sh): bin/
# (bench_flashinfer, bench_cuda), lib/ (libropekit_cuda, libropekit), flashinfer-version.txt.
# 1. bench_flashinfer: FlashInfer's cos/sin-cache RoPE and ropekit on the same inputs, three
#    alternating rounds per row, agreement with the CPU reference;
# 2. bench_cuda on the same shapes (ropekit's own benchmark, same process kind, same run);
# 3. (unless NCU=0) Nsight Compute on FlashInfer's and ropekit's kernels of one row.
set -u
T0=$(date +%s); END=$((T0 + ${SHARE:-60} - 10))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-fi-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $D/; chmod +x $D/bin/*
export LD_LIBRARY_PATH=$D/lib:${LD_LIBRARY_PATH:-}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  cat $S/flashinfer-version.txt; cat $S/commit.txt 2>/dev/null; } >$OUT/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/bin/bench_flashinfer 2>&1 | grep -E "Function|REG" | paste - - |
  grep -E 'BatchQKApplyRotaryPosIdsCosSinCache|RopeQuantizeKernel' | sed -E 's/^.*Function ([^:]*):.*(REG:[0-9]+ STACK:[0-9]+ SHARED:[0-9]+ LOCAL:[0-9]+).*/\1 \2/' |
  c++filt >$OUT/fi_regs.txt 2>&1
echo "t=$(( $(date +%s) - T0 ))s start bench_flashinfer"
timeout $(left 40) $D/bin/bench_flashinfer >$OUT/bench_flashinfer.md 2>&1; echo "bench_flashinfer rc=$?"
# the same shapes, 16-bit x (float32 tables and tables in x's dtype) and the decode rows
ROWS='prefill B=1 S=8192 32+8 x128 float16|prefill B=1 S=8192 32+8 x128 bfloat16|prefill B=1 S=4096 32+8 x128 float16|prefill B=1 S=4096 32+8 x128 bfloat16|Qwen3-0.6B prefill B=4 S=2048 16+8 x128 float16|Qwen3-0.6B prefill B=4 S=2048 16+8 x128 bfloat16|Phi-2 partial B=1 S=8192 32+32 x80 R32 float16|Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16|decode B=256 S=1 32+8 x128 float16|decode B=256 S=1 32+8 x128 bfloat16|decode B=64 S=1 32+8 x128 float16|decode B=64 S=1 32+8 x128 bfloat16'
echo "t=$(( $(date +%s) - T0 ))s start bench_cuda"
timeout $(left 20) $D/bin/bench_cuda "$ROWS" \
  >$OUT/bench_cuda.md 2>&1; echo "bench_cuda rc=$?"
# Nsight Compute: the first FlashInfer and the first ropekit launch of a row (the agreement
# calls; float16): decode B=256 with caches as they are (L2-resident, as in a decode step),
# Llama S=8192 with caches flushed
SECS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis"
if [ "${NCU:-1}" = 1 ]; then
  for row in "decode B=256:none" "Llama-3-8B prefill B=1 S=8192:all"; do
    [ $(left 30) -ge 8 ] || break
    echo "t=$(( $(date +%s) - T0 ))s start ncu ${row%:*}"
    timeout $(left 20) ncu --clock-control none --cache-control ${row##*:} -k 'regex:BatchQKApply|rotary_' -s 0 -c 2 $SECS \
      $D/bin/bench_flashinfer "${row%:*}" >"$OUT/ncu-${row%% *}.txt" 2>&1; echo "ncu rc=$?"
  done
fi
echo "t=$(( $(date +%s) - T0 ))s done"
