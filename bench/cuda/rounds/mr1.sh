#!/usr/bin/env bash
# Device round R1 (session c-mr, 2026-12-02 02:35 UTC), run as .dev/rounds/c-mr/round.sh under a
# 50 s share. Files (bench/cuda/rounds/pack.sh ... /work/main/.dev/rounds/c-mr): bin/ (check_cuda,
# bench_cuda of this branch), lib/ (this branch's libropekit_cuda + libropekit), lib-base/ (main's
# libropekit_cuda: /work/main/build-final, the coordinator's build of main 290e773, whose src/cuda
# equals e94836b's). check_cuda (default, ROPEKIT_CUDA_ROTARY_KERNEL=flat|tile) and memcheck of the
# default (MRoPE kernels only: --kernel-regex kns=mrope) concurrently; three alternating rounds of the MRoPE rows: main, this branch (MRoPE flat
# kernel), this branch with 256-thread MRoPE blocks; (first round only) this branch with the generic
# flat kernel forced (the old MRoPE flat path); Nsight Compute on main's tile kernel and the new kernel.
set -u
T0=$(date +%s); END=$((T0 + 44))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-mr-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=/tmp/c-mr-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*|mrope_[a-z_]+_kernel)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep -E "mrope|tile_kernel_capped" >$L/regs.txt 2>&1
for k in default flat tile; do
  ( e=; [ $k != default ] && e=ROPEKIT_CUDA_ROTARY_KERNEL=$k
    env $e timeout 20 $B/check_cuda >$L/check-$k.log 2>&1; echo "check $k rc=$?" >$L/rc-check-$k.txt ) &
done
( timeout 22 compute-sanitizer --tool memcheck --kernel-regex kns=mrope --print-limit 20 $B/check_cuda >$L/memcheck-default.log 2>&1
  echo "memcheck default rc=$?" >$L/rc-mem-default.txt ) &
wait
for k in default flat tile; do
  cat $L/rc-check-$k.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$k.log | tail -4 >>$L/summary.txt
done
cat $L/rc-mem-default.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-default.log | tail -2 >>$L/summary.txt
stamp "checks done"
ROWS='MRoPE'
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 6) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base
  run_v 1new
  [ $i = 1 ] && run_v 2genflat ROPEKIT_CUDA_ROTARY_KERNEL=flat
  run_v 3new256 ROPEKIT_CUDA_MROPE_BLOCK=256
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary|mrope --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 5 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 6) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc new "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32"
nc base "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32" LD_LIBRARY_PATH=$BASE
nc new "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 float16/float32"
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Executed Instructions  " $L/ncu.log 2>/dev/null | head -40
