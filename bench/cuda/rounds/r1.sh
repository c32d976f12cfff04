#!/usr/bin/env bash
# Device round R1 (session c-rot 3, 2026-12-01 23:25 UTC), run as .dev/rounds/c-rot/round.sh under
# a 90 s share. Files (pack.sh): bin/ (check_cuda, bench_cuda), lib/ (this revision: the span
# kernel behind ROPEKIT_CUDA_SPAN=1|2|3, default choice unchanged), lib-base/ (main bde1c85's
# libropekit_cuda). check_cuda with the default choice and each span variant forced, memcheck
# of span variants, three alternating rounds base / default / span variants / flat with 2 heads
# per thread on the prefill and Phi rows, Nsight Compute on Phi and Llama rows.
set -u
T0=$(date +%s); END=$((T0 + 80))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-rot-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=/tmp/c-rot-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; ncu --version | tail -1; } >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep rotary >$L/regs.txt 2>&1
chk() { local n=$1; shift
  env "$@" timeout $(left 12) $B/check_cuda >$L/check-$n.log 2>&1
  stamp "check $n ($*) rc=$?"; grep -E "checks,|FAIL" $L/check-$n.log | tail -3 >>$L/summary.txt; }
chk d
chk s1 ROPEKIT_CUDA_SPAN=1
chk s2 ROPEKIT_CUDA_SPAN=2
chk s3 ROPEKIT_CUDA_SPAN=3
ROPEKIT_CUDA_SPAN=2 timeout $(left 12) compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-s2.log 2>&1
stamp "memcheck span2 rc=$?"; grep -E "ERROR SUMMARY|checks," $L/memcheck-s2.log | tail -2 >>$L/summary.txt
ROWS='prefill|Phi'
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 10) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base
  run_v 1new
  run_v 2span1 ROPEKIT_CUDA_SPAN=1
  run_v 3span2 ROPEKIT_CUDA_SPAN=2
  run_v 4span1m8 ROPEKIT_CUDA_SPAN=3
  run_v 5flatg2 ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_HEADS_PER_THREAD=2
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
# decode rows once with span 1 vs default (one wave)
timeout $(left 6) $B/bench_cuda "decode B=256" >$L/dec-d.log 2>&1
ROPEKIT_CUDA_SPAN=1 timeout $(left 6) $B/bench_cuda "decode B=256" >$L/dec-s1.log 2>&1
stamp decode
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 6 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 8) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc default "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/float32"
nc span1 "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/float32" ROPEKIT_CUDA_SPAN=1
nc span1 "Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_SPAN=1
nc default "Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/bfloat16"
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^\|" $L/dec-d.log $L/dec-s1.log | cut -c1-160
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req" $L/ncu.log 2>/dev/null | head -48
