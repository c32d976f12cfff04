#!/usr/bin/env bash
# Device round R1 (session c-rot 2, 2026-12-01 20:20 UTC), run as .dev/rounds/c-rot/round.sh
# under a 110 s share. Files (pack.sh): bin/ (check_cuda, bench_cuda), lib/ (this revision:
# the staged cp.async kernel behind ROPEKIT_CUDA_STAGED=1; default choice unchanged), lib-base/
# (main's 8c39a0b libropekit_cuda). check_cuda default and with the staged kernel forced (grid
# capped so each block's pipeline wraps around; 2..5 stages, G 1/2), memcheck of the staged
# kernel, three alternating rounds base / default / staged variants, Nsight Compute.
set -u
T0=$(date +%s); END=$((T0 + 98))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-rot-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=/tmp/c-rot-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  ncu --version | tail -1; } >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z]+_kernel)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep rotary >$L/regs.txt 2>&1
chk() { local n=$1; shift
  env "$@" timeout $(left 15) $B/check_cuda >$L/check-$n.log 2>&1
  stamp "check $n ($*) rc=$?"; grep -E "checks,|FAIL" $L/check-$n.log | tail -3 >>$L/summary.txt; }
chk d
chk s ROPEKIT_CUDA_STAGED=1
chk s2w ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGES=2 ROPEKIT_CUDA_STAGED_BLOCKS=3 ROPEKIT_CUDA_STAGED_WIDE_COPY=0
chk s4g4w ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGES=4 ROPEKIT_CUDA_STAGED_G=4 ROPEKIT_CUDA_STAGED_BLOCKS=4 ROPEKIT_CUDA_STAGED_THREADS=64
chk s5g1w ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGES=5 ROPEKIT_CUDA_STAGED_G=1 ROPEKIT_CUDA_STAGED_BLOCKS=7 ROPEKIT_CUDA_STAGED_THREADS=96
ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGED_BLOCKS=5 timeout $(left 25) compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-s.log 2>&1
stamp "memcheck staged blocks=5 rc=$?"; grep -E "ERROR SUMMARY|checks," $L/memcheck-s.log | tail -2 >>$L/summary.txt
ROWS='prefill|Phi|MRoPE'
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 8) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base
  run_v 1new
  run_v 2s3 ROPEKIT_CUDA_STAGED=1
  run_v 3s2 ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGES=2
  run_v 4s4 ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGES=4
  run_v 5s3g1 ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGED_G=1
  run_v 6s3g4t128 ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGED_G=4 ROPEKIT_CUDA_STAGED_THREADS=128
  run_v 7s3nowide ROPEKIT_CUDA_STAGED=1 ROPEKIT_CUDA_STAGED_WIDE_COPY=0
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
IFS=';' read -ra prow <<<"Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/bfloat16;Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/float32;MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32"
for f in "${prow[@]}"; do
  echo "==== staged row: $f" >>$L/ncu.log
  ROPEKIT_CUDA_STAGED=1 timeout $(left 10) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu staged $f rc=$?"
done
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Block Limit" $L/ncu.log | head -60
