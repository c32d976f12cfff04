#!/usr/bin/env bash
# Device round R2 (session c-rot, 2026-12-01), run as .dev/rounds/c-rot/round.sh under a 100 s
# share. bins.tgz: bin/ (check_cuda, bench_cuda), lib/ (this revision: partial-rotary threads
# grouped by kind, one-wave calls with 2 heads per thread), lib-base/ (main's c96cdce).
# check_cuda on the new default, three alternating A/B rounds of base vs new default vs launch
# knobs of the new library, Nsight Compute on Phi-2 (grouped vs not) and decode, memcheck.
set -u
T0=$(date +%s); END=$((T0 + 88))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-rot-d; rm -rf $D; mkdir -p $D; tar xzf $S/bins.tgz -C $D; cp $S/*.py $D/
B=$D/bin; L=/tmp/c-rot-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z]+_kernel)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+).*/\1 \2 REG \3 STACK \4/' | grep rotary >$L/regs.txt 2>&1
timeout $(left 20) $B/check_cuda >$L/check.log 2>&1
stamp "check default rc=$?"; grep -E "checks,|FAIL" $L/check.log | tail -3 >>$L/summary.txt
ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=3 ROPEKIT_CUDA_HEADS_PER_THREAD=2 ROPEKIT_CUDA_XPF=1 timeout $(left 20) $B/check_cuda >$L/check-pipe.log 2>&1
stamp "check pipe3 g2 xpf rc=$?"; grep -E "checks,|FAIL" $L/check-pipe.log | tail -3 >>$L/summary.txt
ROWS='prefill|Phi|MRoPE|decode B=256'
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 15) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base
  run_v 1new
  run_v 2nosplit ROPEKIT_CUDA_SPLIT=0
  run_v 3tt512 ROPEKIT_CUDA_TILE_THREADS=512
  run_v 4tt128 ROPEKIT_CUDA_TILE_THREADS=128
  run_v 5b64 ROPEKIT_CUDA_BLOCK=64
  run_v 6b256 ROPEKIT_CUDA_BLOCK=256
  run_v 7h1 ROPEKIT_CUDA_HINTS=1
  run_v 8h6 ROPEKIT_CUDA_HINTS=6
  run_v 9flat ROPEKIT_CUDA_TILE=0
  run_v apipe2g2x ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=2 ROPEKIT_CUDA_HEADS_PER_THREAD=2 ROPEKIT_CUDA_XPF=1
  run_v bpipe4g2x ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=4 ROPEKIT_CUDA_HEADS_PER_THREAD=2 ROPEKIT_CUDA_XPF=1
  stamp "ab round $i done"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
for v in split nosplit; do
  sp=1; [ $v = nosplit ] && sp=0
  echo "==== $v Phi f16" >>$L/ncu.log
  ROPEKIT_CUDA_SPLIT=$sp timeout $(left 12) $NCU $B/bench_cuda "Phi-2 partial B=1 S=8192 32+32 x80 R32 float16/float32" >>$L/ncu.log 2>&1
  stamp "ncu $v rc=$?"
done
timeout $(left 30) compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck.log 2>&1
stamp "memcheck rc=$?"; grep -E "ERROR SUMMARY|checks," $L/memcheck.log | tail -2 >>$L/summary.txt
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Issue Slots Busy|Eligible Warps|Local Memory Spilling Req" $L/ncu.log | head -30
grep -E "flat_kernelILi[123]ELi1ELb0" $L/regs.txt | head -12
