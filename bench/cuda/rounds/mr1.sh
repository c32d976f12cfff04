#!/usr/bin/env bash
# Device round R1 (session c-mr, 2026-12-02 05:57 UTC), run as .dev/rounds/c-mr/round.sh under a
# 60 s share. Files (pack.sh): bin/ check_cuda, bench_cuda of this branch and check_cuda_main
# (main's, /work/main/build-final: same check count as this branch's minus its 2 new checks);
# lib/ this branch's libropekit_cuda (default = main's kernels; ROPEKIT_CUDA_MROPE=pipe|async
# [48|56], async3 selects the pipelined MRoPE tile kernel, x in registers or by cp.async (2 or 3
# stages), register cap;
# ROPEKIT_CUDA_MROPE_ITERS=k its slots per block) + libropekit; lib-base/ main's libropekit_cuda.
# check_cuda (default, pipe, pipe56 + tile forced, async, async56, async3, main's binary) and
# memcheck (pipe56, async) concurrently; three alternating rounds of the MRoPE rows: main's
# library, pipe, pipe56, async, async56, pipe56 with 4 slots per block, async3; ncu on the
# bf16/bf16 row (async, pipe).
set -u
T0=$(date +%s); END=$((T0 + 49))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-mr-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=/tmp/c-mr-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  ncu --version | tail -1; } >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep -E "tile_kernel|pipe_kernel" >$L/regs.txt 2>&1
run_c() { local n=$1; shift
  ( env "$@" timeout 20 $B/check_cuda >$L/check-$n.log 2>&1; echo "check $n rc=$?" >$L/rc-check-$n.txt ) & }
run_c default X=1
run_c pipe ROPEKIT_CUDA_MROPE=pipe
run_c pipe56tile ROPEKIT_CUDA_MROPE=pipe56 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_c async ROPEKIT_CUDA_MROPE=async
run_c async56 ROPEKIT_CUDA_MROPE=async56
run_c async3 ROPEKIT_CUDA_MROPE=async3
( LD_LIBRARY_PATH=$BASE timeout 20 $B/check_cuda_main >$L/check-main.log 2>&1; echo "check main's binary rc=$?" >$L/rc-check-main.txt ) &
for m in pipe56 async; do
  ( ROPEKIT_CUDA_MROPE=$m timeout 24 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-$m.log 2>&1
    echo "memcheck $m rc=$?" >$L/rc-mem-$m.txt ) &
done
wait
for k in default pipe pipe56tile async async56 async3 main; do
  cat $L/rc-check-$k.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$k.log | tail -4 >>$L/summary.txt
done
for m in pipe56 async; do
  cat $L/rc-mem-$m.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-$m.log | tail -2 >>$L/summary.txt
done
stamp "checks done"
run_v() {
  local v=$1 rows=$2; shift 2
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 6) $B/bench_cuda "$rows" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  [ $(left 20) -lt 12 ] && break
  run_v 0base MRoPE
  run_v 1pipe MRoPE ROPEKIT_CUDA_MROPE=pipe
  run_v 2pipe56 MRoPE ROPEKIT_CUDA_MROPE=pipe56
  run_v 3async MRoPE ROPEKIT_CUDA_MROPE=async
  run_v 4async56 MRoPE ROPEKIT_CUDA_MROPE=async56
  run_v 5pipe56-it4 MRoPE ROPEKIT_CUDA_MROPE=pipe56 ROPEKIT_CUDA_MROPE_ITERS=4
  run_v 6async3 MRoPE ROPEKIT_CUDA_MROPE=async3
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 6 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 6) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc async "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/bfloat16" ROPEKIT_CUDA_MROPE=async
nc pipe "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/bfloat16" ROPEKIT_CUDA_MROPE=pipe
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Executed Instructions  |L2 Hit|Warp Cycles Per Issued|Block Limit Reg|Grid Size" $L/ncu.log 2>/dev/null | head -40
