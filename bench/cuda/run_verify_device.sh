#!/usr/bin/env bash
# Short device call (session s14-cuda): the final default build (bin/, lib/) — check_cuda with
# the default kernel choice, memcheck with the tile kernel forced on every vectorisable case
# (ROPEKIT_CUDA_ROTARY_KERNEL=tile), one bench round of the rotary rows against the base library
# (lib-base/), Nsight Compute on the tile kernel. Logs: $OUT/logs.tgz.
set -u
D=$(cd "$(dirname "$0")" && pwd)
B=$D/bin; L=/tmp/l; mkdir -p $L
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
timeout 60 $B/check_cuda >$L/check.log 2>&1; echo "check default rc=$?" >>$L/summary.txt
grep -E "checks,|FAIL" $L/check.log | tail -3 >>$L/summary.txt
ROPEKIT_CUDA_ROTARY_KERNEL=tile timeout 120 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-tile.log 2>&1
echo "memcheck tile=1 rc=$?" >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-tile.log | tail -2 >>$L/summary.txt
ROWS='prefill|Phi|MRoPE|decode B=256'
timeout 40 $B/bench_cuda "$ROWS" >$L/bench-new.log 2>&1
LD_LIBRARY_PATH=$BASE timeout 40 $B/bench_cuda "$ROWS" >$L/bench-base.log 2>&1
IFS=';' read -ra prow <<<"MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32;Llama-3-8B prefill B=1 S=4096 32+8 x128 bfloat16/float32"
for f in "${prow[@]}"; do
  echo "==== new row: $f" >>$L/ncu.log
  timeout 40 ncu --clock-control none -s 3 -c 1 -k regex:'rotary' --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section InstructionStats $B/bench_cuda "$f" >>$L/ncu.log 2>&1
done
tar czf $OUT/logs.tgz -C $L .
cat $L/summary.txt
paste -d'#' <(grep -E "^\| [A-Za-z]" $L/bench-base.log | cut -d'|' -f2,3,4,5,9) <(grep -E "^\| [A-Za-z]" $L/bench-new.log | cut -d'|' -f5,9) | sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g; s/  */ /g'
grep -E "^==== |rotary_|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Eligible Warps" $L/ncu.log | cut -c1-110
