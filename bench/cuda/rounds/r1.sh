#!/usr/bin/env bash
# Device round R1 (session c-rot 7, 2026-12-02 05:57 UTC), run as .dev/rounds/c-rot/round.sh
# under a 90 s share. Files (pack.sh): bin/ (check_cuda, bench_cuda), lib/ (this revision: the
# shared mbarrier helpers of common.cuh + the R1 experiment knob ROPEKIT_CUDA_EXP_NAN), lib-base/
# (main 28d0a66's libropekit_cuda: the session's start). R1 experiment knob ROPEKIT_CUDA_EXP_NAN
# (bfloat16 x, half-split): 1 = the bfloat16 rounding without the CPU's NaN payload rule
# (pack2_finite) in the tile (capped at 48 registers: 4 bytes of spills) and bulk kernels;
# 2 = pack2_finite with NaN detection and a redo by the exact rule (tile; ptxas: 92 bytes of
# spills); 3 = as 1 with the tile kernel uncapped (49 registers). check_cuda (default and the
# knobs) and memcheck; three alternating rounds base / this revision on the prefill rows, the
# knob values on the 16-bit-table rows; Nsight Compute on the tile kernel (Llama S=8192
# bf16/bf16) with and without EXP_NAN=1; torch.compile's Triton kernel for the same row dumped
# (TORCH_LOGS=output_code) and profiled.
set -u
T0=$(date +%s); END=$((T0 + 80))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-rot-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=/tmp/c-rot-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  ncu --version | tail -1; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep rotary >$L/regs.txt 2>&1
K=ROPEKIT_CUDA_ROTARY_KERNEL; X=ROPEKIT_CUDA_EXP_NAN
i=0
for c in "" "$X=1" "$X=2" "$X=3" "$K=bulk $X=1" "$K=tile $X=1"; do
  i=$((i+1))
  ( env $c timeout 25 $B/check_cuda >$L/check-$i.log 2>&1; echo "check $i [$c] rc=$?" >$L/rc-check-$i.txt ) &
  case $i in 1|3|5) ( env $c timeout 32 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-$i.log 2>&1
    echo "memcheck $i [$c] rc=$?" >$L/rc-mem-$i.txt ) & ;; esac
done
wait
for i in 1 2 3 4 5 6; do
  cat $L/rc-check-$i.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$i.log | tail -4 >>$L/summary.txt
  [ -f $L/rc-mem-$i.txt ] && { cat $L/rc-mem-$i.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks,|Invalid|Error" $L/memcheck-$i.log | head -4 >>$L/summary.txt; }
done
stamp "checks done"
ROWS='prefill|Phi'
ROWS2='prefill B=1 S=8192 32+8 x128 bfloat16/bfloat16|prefill B=1 S=8192 32+8 x128 float16/float16|prefill B=1 S=4096 32+8 x128 bfloat16/bfloat16|prefill B=1 S=4096 32+8 x128 float16/float16|R32 bfloat16'
run_v() {
  local v=$1 r=$2; shift 2
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 10) $B/bench_cuda "$r" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base "$ROWS"
  run_v 1new "$ROWS"
  run_v 2nan1 "$ROWS2" $X=1
  run_v 3nan2 "$ROWS2" $X=2
  run_v 4nan3 "$ROWS2" $X=3
  stamp "ab round $i"
  [ $(left 40) -lt 36 ] && break
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 6 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 8) $NCU -k regex:rotary $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
nc tile "Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/bfloat16"
nc tile-nan1 "Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/bfloat16" $X=1
[ $(left 20) -ge 14 ] && { TORCH_LOGS=output_code timeout $(left 14) python3 $D/triton_probe.py bfloat16 8192 >$L/triton_code.log 2>&1; stamp "triton code rc=$?"; }
[ $(left 20) -ge 12 ] && { echo "==== triton bf16 S=8192" >>$L/ncu.log
  timeout $(left 20) $NCU -k regex:triton python3 $D/triton_probe.py bfloat16 8192 >>$L/ncu.log 2>&1; stamp "ncu triton rc=$?"; }
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt; grep -E "flat|tile|bulk" $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Executed Instructions   |Block Size|Grid Size|^  [a-z_]*kernel|triton_" $L/ncu.log 2>/dev/null | head -60
grep -E "torch.compile|def triton|XBLOCK|num_warps|tl.load|tl.store|grid=|\.run\(" $L/triton_code.log 2>/dev/null | head -60
