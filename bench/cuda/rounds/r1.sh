#!/usr/bin/env bash
# Device round R1 (session c-rot, 2026-12-01), run as .dev/rounds/c-rot/round.sh under a 100 s
# share: prebuilt binaries in that folder: bin/ (check_cuda, bench_cuda), lib/ (this revision's
# libropekit_cuda), lib-base/ (main's, c96cdce). check_cuda with the pipelined flat kernel
# forced, alternating A/B of the base default against pipelined variants (knobs), decode
# launch-config variants, Nsight Compute flat vs pipelined, bench_torch.py. Logs: $OUT/logs.tgz.
set -u
T0=$(date +%s); END=$((T0 + 86))
left() { local l=$((END - $(date +%s))); [ $l -lt 1 ] && l=1; [ $l -gt $1 ] && l=$1; echo $l; }
S=$(cd "$(dirname "$0")" && pwd)
D=/tmp/c-rot-d; rm -rf $D; mkdir -p $D; tar xzf $S/bins.tgz -C $D; cp $S/*.py $D/
B=$D/bin; L=/tmp/c-rot-l; rm -rf $L; mkdir -p $L/ab $L/dec
NEW=$D/lib:${LD_LIBRARY_PATH:-}; BASE=$D/lib-base:$D/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$NEW
stamp() { echo "t=$(( $(date +%s) - T0 ))s $*" >>$L/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >$L/gpu.txt 2>&1
cuobjdump --dump-resource-usage $D/lib/libropekit_cuda.so.0 2>&1 | grep -A1 -E "Function .*(flat|pipe|tile)" | paste - - |
  sed -E 's/.*(rotary_[a-z]+_kernel)I(.*)EEvNS.*REG:([0-9]+) STACK:([0-9]+).*/\1 \2 REG \3 STACK \4/' >$L/regs.txt 2>&1
ROPEKIT_CUDA_PDL=1 ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=3 timeout $(left 20) $B/check_cuda >$L/check-pipe3.log 2>&1
stamp "check pipe=3 G=4 pdl rc=$?"; grep -E "checks,|FAIL" $L/check-pipe3.log | tail -3 >>$L/summary.txt
ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=2 ROPEKIT_CUDA_XPF=1 ROPEKIT_CUDA_HEADS_PER_THREAD=2 timeout $(left 20) $B/check_cuda >$L/check-pipe2g2.log 2>&1
stamp "check pipe=2 xpf G=2 rc=$?"; grep -E "checks,|FAIL" $L/check-pipe2g2.log | tail -3 >>$L/summary.txt
ROWS='prefill|Phi|MRoPE'
# variant name -> environment (base lib for "0base")
run_v() {
  local v=$1 i=$2; shift 2
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 15) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
# variant name -> environment (base lib for "0base")
dv() { local v=$1; shift; env LD_LIBRARY_PATH=$BASE "$@" timeout $(left 8) $B/bench_cuda "decode B=256" >$L/dec/ab-$v-$i.log 2>&1; }
ab_round() {
  run_v 0base $i
  run_v 1p2 $i ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=2
  run_v 2p4 $i ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=4
  run_v 3p8 $i ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=8
  run_v 4p4g2 $i ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=4 ROPEKIT_CUDA_HEADS_PER_THREAD=2
  run_v 5p4b256 $i ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=4 ROPEKIT_CUDA_BLOCK=256
  run_v 6flat $i ROPEKIT_CUDA_TILE=0
  run_v 7grid6 $i ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE_GRID=6
  run_v 8grid12 $i ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE_GRID=12
  run_v 9xpf4g2 $i ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=4 ROPEKIT_CUDA_XPF=1 ROPEKIT_CUDA_HEADS_PER_THREAD=2
  stamp "ab round $i done"
}
dec_round() {
dv 0base; dv 1g2 ROPEKIT_CUDA_HEADS_PER_THREAD=2; dv 2b64 ROPEKIT_CUDA_BLOCK=64; dv 3b256 ROPEKIT_CUDA_BLOCK=256
dv 4hint0 ROPEKIT_CUDA_HINTS=0; dv 5tile1 ROPEKIT_CUDA_TILE=1; dv 6flat ROPEKIT_CUDA_TILE=0; dv 7g2b64 ROPEKIT_CUDA_HEADS_PER_THREAD=2 ROPEKIT_CUDA_BLOCK=64
BASE=$NEW dv 8p2 ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=2; BASE=$NEW dv apdl ROPEKIT_CUDA_PDL=1; BASE=$NEW dv bpdlflat ROPEKIT_CUDA_PDL=1 ROPEKIT_CUDA_TILE=0
BASE=$NEW dv cpdlg2 ROPEKIT_CUDA_PDL=1 ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_HEADS_PER_THREAD=2; BASE=$NEW dv 9p2g2 ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=2 ROPEKIT_CUDA_HEADS_PER_THREAD=2
  stamp "decode round $i done"
}
i=1; ab_round; dec_round
for v in flat pipe4; do
  pe=1; [ $v = pipe4 ] && pe=4
  echo "==== $v" >>$L/ncu.log
  ROPEKIT_CUDA_TILE=0 ROPEKIT_CUDA_PIPE=$pe timeout $(left 12) ncu --clock-control none -s 3 -c 1 -k regex:'rotary' \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats \
    $B/bench_cuda "Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/float32" >>$L/ncu.log 2>&1
  stamp "ncu $v rc=$?"
done
i=2; ab_round; dec_round
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1; python3 $D/ab_summary.py $L/dec >$L/dec.md 2>&1
export TORCHINDUCTOR_CACHE_DIR=/tmp/c-rot-ind TRITON_CACHE_DIR=/tmp/c-rot-ind/triton
PYTHONUNBUFFERED=1 timeout $(left 60) python3 $D/bench_torch.py >$L/torch.log 2>&1; stamp "torch rc=$?"
tar czf $OUT/logs.tgz -C $L .
( cd /tmp && tar czf $OUT/inductor.tgz c-rot-ind 2>/dev/null; ls -la $OUT/inductor.tgz ) >>$L/summary.txt 2>&1
[ $(stat -c %s $OUT/inductor.tgz 2>/dev/null || echo 0) -gt 1500000 ] && rm -f $OUT/inductor.tgz
cat $L/gpu.txt $L/summary.txt; grep -E 'Li[23]ELi1ELb0' $L/regs.txt | head -16
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md $L/dec.md
grep -E "^==== |Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Eligible Warps|Executed Ipc A" $L/ncu.log | head -30
grep -E "^\|" $L/torch.log | cut -c1-140
