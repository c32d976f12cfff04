#!/usr/bin/env bash
# c-mr, session 9, device round R2 (2026-12-02 16:25 UTC). Folder: bin/ (check_cuda, bench_cuda of
# branch c-mr), lib/ (c-mr's libropekit_cuda + libropekit: main's kernels unchanged, plus the tile
# loop kernel as separate instantiations), lib-base/ (main 7d691ac's libropekit_cuda). Knobs:
# ROPEKIT_CUDA_TILE_GRID=k (the tile kernel's rows on k waves of resident blocks, each looping over
# token blocks), ROPEKIT_CUDA_TILE_PF=1 (with it: prefetch.global.L2 of the token one wave ahead;
# 16-bit x with 16-bit tables), ROPEKIT_CUDA_TILE_XH=1|2 (the one-pass tile kernel of 16-bit x with
# 16-bit tables with L2 policy hints compiled in: 1 x evict_first, 2 x evict_first + L2::256B and
# y evict_first). Variant fl: main's knob ROPEKIT_CUDA_ROTARY_KERNEL=flat
# (the flat kernel with 2 heads per thread on the tile kernel's rows; the scratch flat kernel rounds
# bf16/bf16 with pack2_finite as the tile kernel does). ROPEKIT_CUDA_TILE_PF=k: tile threads
# prefetch (prefetch.global.L2) their chunks of the token k waves of resident blocks ahead.
set -u
T0=$(date +%s); SH=${SHARE:-120}; END=$((T0 + SH - 6))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-mr-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=$OUT; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv; } >$L/gpu.txt 2>&1
for lb in lib lib-base; do echo "== $lb"
cuobjdump --dump-resource-usage $D/$lb/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep -E "tile_kernel|pipe_kernel|bulk_kernel"
done >$L/regs.txt 2>&1
run_c() { local n=$1; shift
  ( env "$@" timeout 25 $B/check_cuda >$L/check-$n.log 2>&1; echo "check $n rc=$?" >$L/rc-check-$n.txt ) & }
run_m() { local n=$1; shift
  ( env "$@" timeout 30 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-$n.log 2>&1
    echo "memcheck $n rc=$?" >$L/rc-mem-$n.txt ) & }
run_c default X=1
run_c flat ROPEKIT_CUDA_ROTARY_KERNEL=flat
run_c tile ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_c bulk ROPEKIT_CUDA_ROTARY_KERNEL=bulk
run_c decode ROPEKIT_CUDA_ROTARY_KERNEL=decode
run_c mtile ROPEKIT_CUDA_MROPE=tile
run_c mpipe ROPEKIT_CUDA_MROPE=pipe
run_c mpipe56 ROPEKIT_CUDA_MROPE=pipe56
run_c g1 ROPEKIT_CUDA_TILE_GRID=1
run_c g1tile ROPEKIT_CUDA_TILE_GRID=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_c g1pftile ROPEKIT_CUDA_TILE_GRID=1 ROPEKIT_CUDA_TILE_PF=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_c g1mtile ROPEKIT_CUDA_TILE_GRID=1 ROPEKIT_CUDA_MROPE=tile
run_c g2 ROPEKIT_CUDA_TILE_GRID=2
run_c xh2tile ROPEKIT_CUDA_TILE_XH=2 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_m default X=1
run_m g1tile ROPEKIT_CUDA_TILE_GRID=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_m g1pftile ROPEKIT_CUDA_TILE_GRID=1 ROPEKIT_CUDA_TILE_PF=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_m xh2tile ROPEKIT_CUDA_TILE_XH=2 ROPEKIT_CUDA_ROTARY_KERNEL=tile
wait
for k in default flat tile bulk decode mtile mpipe mpipe56 g1 g1tile g1pftile g1mtile g2 xh2tile; do
  cat $L/rc-check-$k.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$k.log | tail -4 >>$L/summary.txt
done
for k in default g1tile g1pftile xh2tile; do
  cat $L/rc-mem-$k.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-$k.log | tail -2 >>$L/summary.txt
done

stamp "checks done"
ROWS="prefill|Phi-2|MRoPE"
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "$v" = 0base ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 8) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3 4 5; do
  [ $i -gt 3 ] && [ $(left 60) -lt 48 ] && break
  [ $(left 60) -lt 34 ] && break
  run_v 0base X=1
  run_v 1new X=1
  run_v g1 ROPEKIT_CUDA_TILE_GRID=1
  run_v g2 ROPEKIT_CUDA_TILE_GRID=2
  run_v g1pf ROPEKIT_CUDA_TILE_GRID=1 ROPEKIT_CUDA_TILE_PF=1
  run_v g64pf ROPEKIT_CUDA_TILE_GRID=64 ROPEKIT_CUDA_TILE_PF=1
  run_v xh1 ROPEKIT_CUDA_TILE_XH=1
  run_v xh2 ROPEKIT_CUDA_TILE_XH=2
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 7 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 7) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc base "S=4096 32+8 x128 bfloat16/bfloat16" LD_LIBRARY_PATH=$BASE
nc g1 "S=4096 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_TILE_GRID=1
nc g1pf "S=4096 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_TILE_GRID=1 ROPEKIT_CUDA_TILE_PF=1
nc base "S=8192 32+8 x128 float16/float16" LD_LIBRARY_PATH=$BASE
nc g1 "S=8192 32+8 x128 float16/float16" ROPEKIT_CUDA_TILE_GRID=1
nc xh2 "S=4096 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_TILE_XH=2
nc g64pf "S=4096 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_TILE_GRID=64 ROPEKIT_CUDA_TILE_PF=1
if [ $(left 30) -gt 8 ]; then
  env ROPEKIT_CUDA_TILE_GRID=1 ROPEKIT_CUDA_TILE_PF=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile timeout $(left 30) compute-sanitizer --tool racecheck --kernel-regex kns=rotary_tile_kernel_loop --print-limit 20 $B/check_cuda >$L/racecheck-g1pftile.log 2>&1
  echo "racecheck g1pftile rc=$?" >>$L/summary.txt; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|hazard|checks," $L/racecheck-g1pftile.log | tail -3 >>$L/summary.txt
fi
cat $L/gpu.txt $L/summary.txt; diff <(sed -n "/== lib$/,/== lib-base/p" $L/regs.txt | grep -v ==) <(sed -n "/== lib-base/,\$p" $L/regs.txt | grep -v ==) && echo "regs: scratch = base"; grep -c REG $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Executed Instructions  |L2 Hit|Warp Cycles Per Issued|Block Limit Reg|Grid Size|Block Size|Waves Per SM" $L/ncu.log 2>/dev/null | head -120
