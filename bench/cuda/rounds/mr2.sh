#!/usr/bin/env bash
# Device round R2 (session c-mr, 2026-12-02 06:30 UTC), run as .dev/rounds/c-mr/round.sh under a
# 60 s share. Files (pack.sh): bin/ check_cuda, bench_cuda of this branch; lib/ this branch's
# libropekit_cuda (default: the pipelined MRoPE kernel for 16-bit x with 16-bit tables and for the
# interleaved layout, capped at 56 registers but for f16/f16; ROPEKIT_CUDA_MROPE=tile|pipe|pipe48|
# pipe56|async|late|late56 overrides) + libropekit; lib-base/ main's libropekit_cuda.
# check_cuda (default, MRoPE tile forced, pipe56 for every dtype pair, pipe + tile forced, flat
# forced), memcheck (default) and racecheck (pipe56, pipelined kernels only) concurrently; three
# alternating rounds of the MRoPE rows: main's library, the new default, pipe48, late56, late;
# two rounds of main's QKNorm/regroup rows; ncu on the new default's rows below 90%.
set -u
T0=$(date +%s); END=$((T0 + 49))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-mr-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=/tmp/c-mr-l; rm -rf $L; mkdir -p $L/ab $L/qk
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
run_c mtile ROPEKIT_CUDA_MROPE=tile
run_c pipe56 ROPEKIT_CUDA_MROPE=pipe56
run_c pipetile ROPEKIT_CUDA_MROPE=pipe ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_c flat ROPEKIT_CUDA_ROTARY_KERNEL=flat
( timeout 24 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-default.log 2>&1
  echo "memcheck default rc=$?" >$L/rc-mem-default.txt ) &
( ROPEKIT_CUDA_MROPE=pipe56 timeout 24 compute-sanitizer --tool racecheck --racecheck-report all --print-limit 20 --kernel-regex kns=rotary_pipe $B/check_cuda >$L/racecheck-pipe56.log 2>&1
  echo "racecheck pipe56 rc=$?" >$L/rc-race.txt ) &
wait
for k in default mtile pipe56 pipetile flat; do
  cat $L/rc-check-$k.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$k.log | tail -4 >>$L/summary.txt
done
cat $L/rc-mem-default.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-default.log | tail -2 >>$L/summary.txt
cat $L/rc-race.txt >>$L/summary.txt; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|hazard|checks," $L/racecheck-pipe56.log | tail -4 >>$L/summary.txt
stamp "checks done"
run_v() {
  local v=$1 rows=$2 dir=$3; shift 3
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 6) $B/bench_cuda "$rows" >$L/$dir/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  [ $(left 20) -lt 14 ] && break
  run_v 0base MRoPE ab
  run_v 1new MRoPE ab
  run_v 2pipe48 MRoPE ab ROPEKIT_CUDA_MROPE=pipe48
  run_v 3late56 MRoPE ab ROPEKIT_CUDA_MROPE=late56
  run_v 4late MRoPE ab ROPEKIT_CUDA_MROPE=late
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
for i in 1 2; do
  [ $(left 10) -lt 8 ] && break
  run_v 0base "QKNorm|Regroup" qk; stamp "qknorm/regroup (main) run $i"
done
python3 $D/ab_summary.py $L/qk >$L/qk.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 6 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 6) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc new "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/bfloat16"
nc new "MRoPE interleaved Qwen3-VL-8B S=8192 32+8 x128 bfloat16/bfloat16"
nc new "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 float16/float32"
nc new "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 float16/float16"
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md $L/qk.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Executed Instructions  |L2 Hit|Warp Cycles Per Issued|Block Limit Reg|Grid Size|Block Size" $L/ncu.log 2>/dev/null | head -70
