#!/usr/bin/env bash
# Device round R2 (session c-rot 3, 2026-12-02 00:00 UTC), run as .dev/rounds/c-rot/round.sh under
# a 90 s share. Files (pack.sh): bin/ (check_cuda, bench_cuda), lib/ (this revision: flat kernel
# with 2 heads per thread on every multi-wave flat call, tile kernel only where the tables are in
# x's dtype (and MRoPE); flat G=2 capped at 56 registers behind ROPEKIT_CUDA_FLAT_CAP=1),
# lib-base/ (main bde1c85's libropekit_cuda). check_cuda (default, capped flat forced, tile
# forced, 4 heads forced), memcheck, three alternating rounds base / new / capped / block sizes /
# flat forced on the prefill, Phi and MRoPE rows, Nsight Compute.
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
chk cap ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_FLAT_CAP=1
chk tile ROPEKIT_CUDA_TILE=1
chk g4 ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_HEADS_PER_THREAD=4
timeout $(left 12) compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck.log 2>&1
stamp "memcheck default rc=$?"; grep -E "ERROR SUMMARY|checks," $L/memcheck.log | tail -2 >>$L/summary.txt
ROWS='prefill|Phi|MRoPE'
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 10) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base
  run_v 1new
  run_v 2cap ROPEKIT_CUDA_FLAT_CAP=1
  run_v 3b256 ROPEKIT_CUDA_BLOCK=256
  run_v 4b64 ROPEKIT_CUDA_BLOCK=64
  run_v 5flat ROPEKIT_CUDA_TILE=0
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 6 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 8) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc new "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/float32"
nc cap "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/float32" ROPEKIT_CUDA_FLAT_CAP=1
nc new "Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/float32"
nc new "Llama-3-8B prefill B=1 S=4096 32+8 x128 bfloat16/bfloat16"
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt; grep -E "flat" $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req" $L/ncu.log 2>/dev/null | head -40
