#!/usr/bin/env bash
# One device call (session s14-cuda, 2026-12-01): prebuilt binaries carried in .dev/<branch>:
# bin/ (check_cuda, bench_cuda of this revision), lib/ (this revision's libraries), lib-base/
# (the previous revision's libropekit_cuda, same API). check_cuda with the flat and the tile
# kernel forced (ROPEKIT_CUDA_ROTARY_KERNEL=flat|tile), memcheck, alternating A/B (base library vs this
# revision with the flat kernel vs the tile kernel), the full bench, Nsight Compute on chosen
# rows for base and new, the PyTorch peers. Logs: $OUT/logs.tgz. (When it ran, the library's
# knob read 0 = flat, 2 = tile with 2 heads per thread and defaulted to the flat kernel; the
# knob now reads 0 | 1 and its default is tile_preferred in src/cuda/rotary.cu.)
set -u
D=$(cd "$(dirname "$0")" && pwd)
B=$D/bin; L=/tmp/l; mkdir -p $L
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  for t in ncu compute-sanitizer python3; do echo "$t: $(command -v $t || echo absent)"; done
  ncu --version 2>/dev/null | tail -1; } >$L/gpu.txt 2>&1
for t in flat tile; do
  ROPEKIT_CUDA_ROTARY_KERNEL=$t timeout 120 $B/check_cuda >$L/check-t$t.log 2>&1; echo "check tile=$t rc=$?" >>$L/summary.txt
  grep -E "checks,|FAIL" $L/check-t$t.log | tail -3 >>$L/summary.txt
done
ROPEKIT_CUDA_ROTARY_KERNEL=flat timeout 200 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck.log 2>&1
echo "memcheck rc=$?" >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck.log | tail -2 >>$L/summary.txt
ROWS='prefill|Phi|MRoPE|decode B=256|QKNorm DS-V4 2048|Regroup'
mkdir -p $L/ab
for i in 1 2 3; do
  LD_LIBRARY_PATH=$BASE timeout 90 $B/bench_cuda "$ROWS" >$L/ab/ab-1base-$i.log 2>&1
  ROPEKIT_CUDA_ROTARY_KERNEL=flat timeout 90 $B/bench_cuda "$ROWS" >$L/ab/ab-2new-$i.log 2>&1
  ROPEKIT_CUDA_ROTARY_KERNEL=tile timeout 90 $B/bench_cuda "$ROWS" >$L/ab/ab-3tile2-$i.log 2>&1
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
ROPEKIT_CUDA_ROTARY_KERNEL=flat timeout 200 $B/bench_cuda >$L/bench.log 2>&1; echo "bench rc=$?" >>$L/summary.txt
IFS=';' read -ra prow <<<"Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/float32;Llama-3-8B prefill B=1 S=4096 32+8 x128 bfloat16/float32;MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32"
for v in base new; do for f in "${prow[@]}"; do
  lp=$NEW; [ $v = base ] && lp=$BASE
  echo "==== $v row: $f" >>$L/ncu.log
  LD_LIBRARY_PATH=$lp ROPEKIT_CUDA_ROTARY_KERNEL=flat timeout 100 ncu --clock-control none -s 3 -c 1 -k regex:'qknorm|rotary|regroup' \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section InstructionStats $B/bench_cuda "$f" >>$L/ncu.log 2>&1; echo "ncu rc=$? ($v $f)" >>$L/summary.txt
done; done
PYTHONUNBUFFERED=1 timeout 200 python3 $D/bench_torch.py >$L/torch.log 2>&1; echo "torch rc=$?" >>$L/summary.txt
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Eligible Warps|Executed Ipc A" $L/ncu.log | head -60
grep -E "^\||torch " $L/torch.log | cut -c1-120
