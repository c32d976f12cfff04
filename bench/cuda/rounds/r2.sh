#!/usr/bin/env bash
# Device round R2 (session c-rot 4, 2026-12-02 03:10 UTC), run as .dev/rounds/c-rot/round.sh
# under a 90 s share. Files (pack.sh): bin/ (check_cuda, bench_cuda), lib/ (this revision: the
# bulk kernel by default for partial rotary), lib-base/ (main e94836b's libropekit_cuda).
# check_cuda + memcheck with the default and the bulk kernel forced (registers for 8 and for 10
# blocks per SM), check_cuda with flat/tile forced; three alternating rounds base / this
# revision / variants; Nsight Compute. No torch (R3).
set -u
T0=$(date +%s); END=$((T0 + 82))
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
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep rotary >$L/regs.txt 2>&1
K=ROPEKIT_CUDA_ROTARY_KERNEL
CS=("" "$K=bulk" "$K=bulk ROPEKIT_CUDA_BULK_MINB=10" "$K=bulk ROPEKIT_CUDA_BULK_ITEMS=64 ROPEKIT_CUDA_BULK_BYTES=512" "$K=flat" "$K=tile")
for i in 0 1 2 3 4 5; do
  c=${CS[$i]}
  ( env $c timeout 25 $B/check_cuda >$L/check-$i.log 2>&1; echo "check $i [$c] rc=$?" >$L/rc-check-$i.txt ) &
  [ $i -le 2 ] && ( env $c timeout 32 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-$i.log 2>&1
    echo "memcheck $i [$c] rc=$?" >$L/rc-mem-$i.txt ) &
done
wait
for i in 0 1 2 3 4 5; do
  cat $L/rc-check-$i.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$i.log | tail -4 >>$L/summary.txt
  [ -f $L/rc-mem-$i.txt ] && { cat $L/rc-mem-$i.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks,|Invalid|Error" $L/memcheck-$i.log | head -4 >>$L/summary.txt; }
done
stamp "checks done"
HANG=0; grep -q "rc=124" $L/rc-check-1.txt $L/rc-check-0.txt && HANG=1 && stamp "check timed out: variants skipped"
run_v() {
  local v=$1 rows=$2; shift 2
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  [ $HANG = 1 ] && [ "${v#0base}" = "$v" ] && return 0
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 12) $B/bench_cuda "$rows" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base 'prefill|Phi|decode'
  run_v 1new 'prefill|Phi|decode'
  run_v 2minb10 'Phi' ROPEKIT_CUDA_BULK_MINB=10
  run_v 3items2 'Phi' ROPEKIT_CUDA_BULK_ITEMS=2
  run_v 4bulkall10 'prefill|Phi' $K=bulk ROPEKIT_CUDA_BULK_MINB=10
  stamp "ab round $i"
  [ $(left 30) -lt 22 ] && break
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 -k regex:rotary --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 lp=$2 f=$3; shift 3
  [ $(left 10) -lt 6 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 8) $NCU $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc new $NEW "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/bfloat16"
nc new $NEW "Phi-2 partial B=1 S=8192 32+32 x80 R32 float16/float32"
nc base $BASE "Llama-3-8B prefill B=1 S=8192 32+8 x128 float16/float16"
nc base $BASE "Llama-3-8B prefill B=1 S=4096 32+8 x128 float16/float32"
nc base $BASE "Llama-3-8B prefill B=1 S=4096 32+8 x128 bfloat16/bfloat16"
nc minb10 $NEW "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/bfloat16" ROPEKIT_CUDA_BULK_MINB=10
nc base $BASE "Phi-2 partial B=1 S=8192 32+32 x80 R32 bfloat16/bfloat16"
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt; grep -E "bulk" $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Executed Instructions   |rotary_[a-z_]*kernel" $L/ncu.log 2>/dev/null | head -90
