#!/usr/bin/env bash
# Device round R3 (session c-mr, 2026-12-02 07:00 UTC; the final measurements for the MRoPE section
# of bench/results-cuda.md), run as .dev/rounds/c-mr/round.sh under a 70 s share. Files (pack.sh):
# bin/ check_cuda and bench_cuda of this branch, lib/ this branch's final libropekit_cuda +
# libropekit, lib-base/ main's libropekit_cuda (/work/main/build-final). check_cuda (default,
# MRoPE's tile kernel forced, the tile and the flat kernel forced) and memcheck (default, tile
# forced, flat forced) concurrently; three alternating rounds of the MRoPE rows (main's library /
# this branch's); bench_torch.py MRoPE (the torch.compile peer, same call); Nsight Compute on the
# interleaved float32 row and the bf16/f32 row if time is left.
set -u
T0=$(date +%s); END=$((T0 + 59))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-mr-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=/tmp/c-mr-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep -E "tile_kernel|pipe_kernel" >$L/regs.txt 2>&1
run_c() { local n=$1; shift
  ( env "$@" timeout 20 $B/check_cuda >$L/check-$n.log 2>&1; echo "check $n rc=$?" >$L/rc-check-$n.txt ) & }
run_m() { local n=$1; shift
  ( env "$@" timeout 24 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-$n.log 2>&1
    echo "memcheck $n rc=$?" >$L/rc-mem-$n.txt ) & }
run_c default X=1
run_c mtile ROPEKIT_CUDA_MROPE=tile
run_c tile ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_c flat ROPEKIT_CUDA_ROTARY_KERNEL=flat
run_m default X=1
run_m tile ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_m flat ROPEKIT_CUDA_ROTARY_KERNEL=flat
wait
for k in default mtile tile flat; do
  cat $L/rc-check-$k.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$k.log | tail -4 >>$L/summary.txt
done
for k in default tile flat; do
  cat $L/rc-mem-$k.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-$k.log | tail -2 >>$L/summary.txt
done
stamp "checks done"
run_v() {
  local v=$1 rows=$2; shift 2
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 6) $B/bench_cuda "$rows" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  [ $(left 30) -lt 25 ] && break
  run_v 0base MRoPE
  run_v 1new MRoPE
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
PYTHONUNBUFFERED=1 timeout $(left 30) python3 $D/bench_torch.py MRoPE >$L/torch.log 2>&1; stamp "torch rc=$?"
python3 $D/table.py $L/ab $L/torch.log 0base 1new >$L/table.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 6 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 6) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc new "MRoPE interleaved Qwen3-VL-8B S=8192 32+8 x128 float32/float32"
nc new "MRoPE Qwen2.5-VL-7B S=8192 28+4 x128 bfloat16/float32"
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^\|" $L/torch.log | cut -c1-160
cat $L/table.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Executed Instructions  |L2 Hit|Warp Cycles Per Issued|Block Limit Reg|Grid Size|Block Size" $L/ncu.log 2>/dev/null | head -40
