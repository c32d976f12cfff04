#!/usr/bin/env bash
# Device round R2 (session c-rot 7, 2026-12-02 06:30 UTC), run as .dev/rounds/c-rot/round.sh
# under a 90 s share. Files (pack.sh): bin/ (check_cuda, bench_cuda), lib/ (this revision),
# lib-base/ (main 28d0a66's libropekit_cuda: the session's start). Knobs (R1/R2 experiments):
# ROPEKIT_CUDA_EXP_NAN=3 (bfloat16 rounding without the CPU's NaN payload rule, tile kernel
# uncapped, bulk kernel; R1: Llama S=8192 bf16/bf16 47.68 -> 46.78 us), ROPEKIT_CUDA_EXP_DEC=1
# (decode / one-wave calls: flat kernel with one head per thread; =2: in blocks of 64). check_cuda + memcheck; three
# alternating rounds base / this revision (prefill, Phi-2, QKNorm: the common.cuh mbarrier
# helpers, decode) and the knobs on their rows; c-fi's bench_flashinfer (FlashInfer's decode
# kernel and ours in one process) with this revision and with EXP_DEC=1; Nsight Compute on both
# decode kernels; torch.compile's Triton kernel code (triton_probe.py) if time is left.
# lib-pipe/: this revision + c-mr's pipelined tile kernel (branch c-mr 8403991 mrope_pipe.cuh)
# enabled for per-token ids by ROPEKIT_CUDA_MROPE=pipe56|pipe (not committed: a scratch build).
set -u
T0=$(date +%s); END=$((T0 + 80))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-rot-d; rm -rf $D; mkdir -p $D; cp -r $S/bin $S/lib $S/lib-base $S/lib-pipe $S/*.py $D/; chmod +x $D/bin/*
B=$D/bin; L=/tmp/c-rot-l; rm -rf $L; mkdir -p $L/ab
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}; PIPE=$D/lib-pipe:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  ncu --version | tail -1; } >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -E "Function|REG" | paste - - |
  sed -E 's/.*(rotary_[a-z_]+_kernel[a-z_]*)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+) SHARED:([0-9]+) LOCAL:([0-9]+).*/\1 \2 REG \3 STACK \4 LOCAL \6/' | grep rotary >$L/regs.txt 2>&1
K=ROPEKIT_CUDA_ROTARY_KERNEL; X=ROPEKIT_CUDA_EXP_NAN; R=ROPEKIT_CUDA_EXP_RT
i=0
DEC=ROPEKIT_CUDA_EXP_DEC
FI=$PWD/.dev/rounds/c-fi
MR=ROPEKIT_CUDA_MROPE
for c in "" "$X=3" "$DEC=1" "$K=flat $DEC=2" "LD_LIBRARY_PATH=$PIPE $MR=pipe56" "LD_LIBRARY_PATH=$PIPE $MR=pipe"; do
  i=$((i+1))
  ( env $c timeout 25 $B/check_cuda >$L/check-$i.log 2>&1; echo "check $i [$c] rc=$?" >$L/rc-check-$i.txt ) &
  case $i in 1|3|5) ( env $c timeout 32 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-$i.log 2>&1
    echo "memcheck $i [$c] rc=$?" >$L/rc-mem-$i.txt ) & ;; esac
done
wait
for j in $(seq 1 $i); do
  cat $L/rc-check-$j.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$j.log | tail -4 >>$L/summary.txt
  [ -f $L/rc-mem-$j.txt ] && { cat $L/rc-mem-$j.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks,|Invalid|Error" $L/memcheck-$j.log | head -4 >>$L/summary.txt; }
done
stamp "checks done"
ROWS='prefill|Phi|QKNorm|decode B=64|decode B=256'
ROWSD='decode B=64|decode B=256'
ROWS2='prefill B=1 S=8192 32+8 x128 bfloat16/bfloat16|prefill B=1 S=8192 32+8 x128 float16/float16|prefill B=1 S=4096 32+8 x128 bfloat16/bfloat16|prefill B=1 S=4096 32+8 x128 float16/float16|R32 bfloat16'
run_v() {
  local v=$1 r=$2; shift 2
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE; [ "${v#6pipe}" != "$v" ] && lp=$PIPE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 10) $B/bench_cuda "$r" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base "$ROWS"
  run_v 1new "$ROWS"
  run_v 2nan3 "$ROWS2" $X=3
  run_v 4dec1 "$ROWSD" $DEC=1
  run_v 5dec2 "$ROWSD" $DEC=2
  run_v 6pipe56 "$ROWS2" $MR=pipe56
  run_v 6pipefree "$ROWS2" $MR=pipe
  stamp "ab round $i"
  [ $(left 40) -lt 30 ] && break
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
NCU="ncu --clock-control none -s 3 -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
nc() { local n=$1 f=$2; shift 2
  [ $(left 10) -lt 6 ] && return 0
  echo "==== $n row: $f" >>$L/ncu.log
  env "$@" timeout $(left 8) $NCU -k regex:rotary $B/bench_cuda "$f" >>$L/ncu.log 2>&1; stamp "ncu $n $f rc=$?"; }
if [ -x $FI/bin/bench_flashinfer ]; then
  mkdir -p $D/fi; cp -r $FI/bin $FI/lib $D/fi/ 2>/dev/null; chmod +x $D/fi/bin/*
  for v in 1new 4dec1; do
    e=; [ $v = 4dec1 ] && e="$DEC=1"
    env LD_LIBRARY_PATH=$D/lib:$D/fi/lib $e timeout $(left 12) $D/fi/bin/bench_flashinfer 'decode' >$L/fi-$v.md 2>&1; stamp "flashinfer decode $v rc=$?"
  done
  [ $(left 12) -ge 8 ] && { echo "==== flashinfer + ropekit default, decode B=256 f16 (caches as they are)" >>$L/ncu.log
    env LD_LIBRARY_PATH=$D/lib:$D/fi/lib timeout $(left 10) ncu --clock-control none --cache-control none -k 'regex:BatchQKApply|rotary_' -s 0 -c 2 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats \
      $D/fi/bin/bench_flashinfer 'decode B=256' >>$L/ncu.log 2>&1; stamp "ncu flashinfer rc=$?"; }
  [ $(left 12) -ge 8 ] && { echo "==== ropekit EXP_DEC=1, decode B=256 f16 (caches as they are)" >>$L/ncu.log
    env LD_LIBRARY_PATH=$D/lib:$D/fi/lib $DEC=1 timeout $(left 10) ncu --clock-control none --cache-control none -k 'regex:rotary_' -s 0 -c 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats \
      $D/fi/bin/bench_flashinfer 'decode B=256' >>$L/ncu.log 2>&1; stamp "ncu dec1 rc=$?"; }
fi
if [ $(left 20) -ge 14 ]; then
  mkdir -p $L/ind
  TORCHINDUCTOR_COMPILE_THREADS=1 TORCHINDUCTOR_CACHE_DIR=$L/ind TORCH_LOGS=output_code PYTHONUNBUFFERED=1 \
    timeout $(left 16) python3 $D/triton_probe.py bfloat16 4096 >$L/triton_code.log 2>&1; stamp "triton code rc=$?"
  find $L/ind -name '*.py' -size -200k | head -20 | while read f; do grep -l "triton.jit\|@triton" "$f" >/dev/null 2>&1 && cp "$f" $L/; done
  rm -rf $L/ind
fi
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt; grep -E "flat|tile|bulk" $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occ|Eligible Warps|Issued Warp|Local Memory Spilling Req|Executed Instructions   |Block Size|Grid Size|^  [A-Za-z_]*[Kk]ernel|rotary_|BatchQK" $L/ncu.log 2>/dev/null | head -80
for v in 1new 4dec1; do echo "== fi-$v"; grep -E "^\| decode" $L/fi-$v.md 2>/dev/null | head -4 | cut -c1-200; done
grep -E "XBLOCK|num_warps|tl.load|tl.store|def triton|grid|torch.compile" $L/triton_code.log 2>/dev/null | head -40
