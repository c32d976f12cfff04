#!/usr/bin/env bash
# c-mr, session 9, device round R1 (2026-12-02 15:35 UTC). Folder: bin/ (check_cuda, bench_cuda of
# branch c-mr's scratch build), lib/ (scratch libropekit_cuda + libropekit), lib-base/ (main
# 7d691ac's libropekit_cuda). Scratch knobs: ROPEKIT_CUDA_TILE_PERSIST=k (tile kernel on a grid of
# k waves of resident blocks looping over tokens), ROPEKIT_CUDA_HINTS bits 8 (x loads L2
# evict_first policy), 16 (x loads L2::256B prefetch), 32 (y stores L2 evict_first policy),
# 64 (bulk kernel copies L2 evict_first); default 5. Variant fl: main's knob ROPEKIT_CUDA_ROTARY_KERNEL=flat
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
run_c persist1 ROPEKIT_CUDA_TILE_PERSIST=1
run_c tpersist1 ROPEKIT_CUDA_TILE_PERSIST=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_c hints125 ROPEKIT_CUDA_HINTS=125
run_c p1pf ROPEKIT_CUDA_TILE_PERSIST=1 ROPEKIT_CUDA_TILE_PF=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_c bhints125 ROPEKIT_CUDA_HINTS=125 ROPEKIT_CUDA_ROTARY_KERNEL=bulk
run_m default X=1
run_m persist1 ROPEKIT_CUDA_TILE_PERSIST=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile
run_m hints125 ROPEKIT_CUDA_HINTS=125
run_m p1pf ROPEKIT_CUDA_TILE_PERSIST=1 ROPEKIT_CUDA_TILE_PF=1 ROPEKIT_CUDA_ROTARY_KERNEL=tile
wait
for k in default flat tile bulk decode mtile mpipe mpipe56 persist1 tpersist1 hints125 bhints125 p1pf; do
  cat $L/rc-check-$k.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$k.log | tail -4 >>$L/summary.txt
done
for k in default persist1 hints125 p1pf; do
  cat $L/rc-mem-$k.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-$k.log | tail -2 >>$L/summary.txt
done
stamp "checks done"
ROWS="prefill|Phi-2|MRoPE"
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "$v" = 0base ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 8) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  [ $(left 60) -lt 40 ] && break
  run_v 0base X=1
  run_v 1new X=1
  run_v p1 ROPEKIT_CUDA_TILE_PERSIST=1
  run_v p2 ROPEKIT_CUDA_TILE_PERSIST=2
  run_v h13 ROPEKIT_CUDA_HINTS=13
  run_v h21 ROPEKIT_CUDA_HINTS=21
  run_v h37 ROPEKIT_CUDA_HINTS=37
  run_v h69 ROPEKIT_CUDA_HINTS=69
  run_v h61 ROPEKIT_CUDA_HINTS=61
  run_v fl ROPEKIT_CUDA_ROTARY_KERNEL=flat
  run_v pf1 ROPEKIT_CUDA_TILE_PF=1
  run_v p1pf ROPEKIT_CUDA_TILE_PERSIST=1 ROPEKIT_CUDA_TILE_PF=1
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 7 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 7) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc base "S=4096 32+8 x128 bfloat16/bfloat16" LD_LIBRARY_PATH=$BASE
nc p1 "S=4096 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_TILE_PERSIST=1
nc h13 "S=4096 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_HINTS=13
nc h21 "S=4096 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_HINTS=21
nc pf1 "S=4096 32+8 x128 bfloat16/bfloat16" ROPEKIT_CUDA_TILE_PF=1
nc base "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/bfloat16" LD_LIBRARY_PATH=$BASE
nc h69 "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/bfloat16" ROPEKIT_CUDA_HINTS=69
cat $L/gpu.txt $L/summary.txt; diff <(sed -n "/== lib$/,/== lib-base/p" $L/regs.txt | grep -v ==) <(sed -n "/== lib-base/,\$p" $L/regs.txt | grep -v ==) && echo "regs: scratch = base"; grep -c REG $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Executed Instructions  |L2 Hit|Warp Cycles Per Issued|Block Limit Reg|Grid Size|Block Size|Waves Per SM" $L/ncu.log 2>/dev/null | head -120
