#!/usr/bin/env bash
# Device round R3 (session c-rot, 2026-12-01; final measurements for bench/results-cuda.md), run
# as .dev/rounds/c-rot/round.sh under a 180 s share (.dev/rounds/c-rot/SHARE). bins.tgz: bin/ (check_cuda, bench_cuda),
# lib/ (this revision), lib-base/ (main's c96cdce libropekit_cuda). check_cuda with the default
# kernel choice and with the flat / tile kernel forced, compute-sanitizer memcheck of the
# default, three alternating A/B rounds base vs new on every rotary row, bench_torch.py (the
# PyTorch peers, same run), Nsight Compute on the rows whose kernel choice changed.
set -u
T0=$(date +%s); END=$((T0 + 168))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-rot-d; rm -rf $D; mkdir -p $D; tar xzf $S/bins.tgz -C $D; cp $S/*.py $D/
B=$D/bin; L=/tmp/c-rot-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  ncu --version | tail -1; compute-sanitizer --version | tail -1; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z]+_kernel)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+).*/\1 \2 REG \3 STACK \4/' | grep rotary >$L/regs.txt 2>&1
for t in d 0 1; do
  if [ $t = d ]; then timeout $(left 20) $B/check_cuda >$L/check-$t.log 2>&1
  else ROPEKIT_CUDA_TILE=$t timeout $(left 20) $B/check_cuda >$L/check-$t.log 2>&1; fi
  stamp "check tile=$t rc=$?"; grep -E "checks,|FAIL" $L/check-$t.log | tail -3 >>$L/summary.txt
done
timeout $(left 40) compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck.log 2>&1
stamp "memcheck default rc=$?"; grep -E "ERROR SUMMARY|checks," $L/memcheck.log | tail -2 >>$L/summary.txt
ROWS='prefill|Phi|MRoPE|decode'
for i in 1 2 3; do
  LD_LIBRARY_PATH=$BASE timeout $(left 15) $B/bench_cuda "$ROWS" >$L/ab/ab-1base-$i.log 2>&1
  timeout $(left 15) $B/bench_cuda "$ROWS" >$L/ab/ab-2new-$i.log 2>&1
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
PYTHONUNBUFFERED=1 timeout $(left 50) python3 $D/bench_torch.py >$L/torch.log 2>&1; stamp "torch rc=$?"
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
IFS=';' read -ra prow <<<"decode B=256 S=1 32+8 x128 float32/float32;MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32;Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/bfloat16;Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/float32"
for f in "${prow[@]}"; do for v in base new; do
  case "$f" in Llama*|Phi*) [ $v = base ] && continue;; esac
  lp=$NEW; [ $v = base ] && lp=$BASE
  echo "==== $v row: $f" >>$L/ncu.log
  LD_LIBRARY_PATH=$lp timeout $(left 14) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $v $f rc=$?"
done; done
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Local Memory Spilling Req" $L/ncu.log | head -40
grep -E "^\|" $L/torch.log | cut -c1-140
