#!/usr/bin/env bash
# Device round R2 (session c-mr, 2026-12-02 03:10 UTC), run as .dev/rounds/c-mr/round.sh under a
# 50 s share. Files as R1 (pack.sh; lib-base = main's libropekit_cuda, /work/main/build-final).
# R1 showed the MRoPE flat kernel slower than main's tile kernel on most MRoPE rows (occupancy:
# 8 blocks of 128 by registers vs the tile kernel's 10). R2 measures L2 bulk prefetches issued a
# distance ahead (ROPEKIT_CUDA_MROPE_PF = tokens ahead; ROPEKIT_CUDA_MROPE_PFX = 0 the table rows
# a later token's ids select, 1 those and the later token's x row, 2 the x row only) on the tile
# kernel (this build's MRoPE default, as main) and on the MRoPE flat kernel
# (ROPEKIT_CUDA_MROPE_KERNEL=1). check_cuda: default, tile + prefetch, flat MRoPE + prefetch,
# memcheck (tile kernels: --kernel-regex kns=rotary_tile) with the prefetch; A/B of the MRoPE rows,
# 3 alternating rounds; Nsight Compute on the tile kernel with two prefetch settings.
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
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*|mrope_[a-z_]+_kernel)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep -E "mrope|tile_kernel" >$L/regs.txt 2>&1
run_c() { local n=$1; shift
  ( env "$@" timeout 20 $B/check_cuda >$L/check-$n.log 2>&1; echo "check $n rc=$?" >$L/rc-check-$n.txt ) & }
run_c default
run_c tilepf ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=1
run_c flatpf ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=1 ROPEKIT_CUDA_MROPE_KERNEL=1
( ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=1 timeout 22 compute-sanitizer --tool memcheck --kernel-regex kns=rotary_tile --print-limit 20 $B/check_cuda >$L/memcheck-tilepf.log 2>&1
  echo "memcheck tilepf rc=$?" >$L/rc-mem.txt ) &
wait
for k in default tilepf flatpf; do
  cat $L/rc-check-$k.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$k.log | tail -4 >>$L/summary.txt
done
cat $L/rc-mem.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-tilepf.log | tail -2 >>$L/summary.txt
stamp "checks done"
ROWS='MRoPE'
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 6) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base
  run_v 1pfx ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=2
  run_v 2pfxt ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=1
  run_v 3pft ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=0
  run_v 4pfx2048 ROPEKIT_CUDA_MROPE_PF=2048 ROPEKIT_CUDA_MROPE_PFX=2
  run_v 5flatpfxt ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=1 ROPEKIT_CUDA_MROPE_KERNEL=1
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary|mrope --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 5 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 6) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc pfx "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32" ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=2
nc pfxt "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32" ROPEKIT_CUDA_MROPE_PF=1024 ROPEKIT_CUDA_MROPE_PFX=1
nc base "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/bfloat16" LD_LIBRARY_PATH=$BASE
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Executed Instructions  " $L/ncu.log 2>/dev/null | head -40
