#!/usr/bin/env bash
# Device round R3 (session c-rot 7, 2026-12-02 07:00 UTC; the final measurements for
# bench/results-cuda.md), run as .dev/rounds/c-rot/round.sh under a 90 s share. Files
# (pack.sh): bin/ (check_cuda, bench_cuda), lib/ (this revision), lib-base/ (main 28d0a66's
# libropekit_cuda: the session's start). check_cuda and compute-sanitizer memcheck with the
# default kernel choice and each kernel forced (ROPEKIT_CUDA_ROTARY_KERNEL=flat|tile|bulk; the
# eight runs concurrently, they are correctness runs), three alternating rounds base / this
# revision on the rotary rows (prefill, Phi-2, decode; MRoPE: c-mr's round), bench_torch.py
# (the PyTorch peers on the same rows, same call) last, alone.
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
for k in default flat tile bulk; do
  ( e=; [ $k != default ] && e=ROPEKIT_CUDA_ROTARY_KERNEL=$k
    env $e timeout 25 $B/check_cuda >$L/check-$k.log 2>&1; echo "check $k rc=$?" >$L/rc-check-$k.txt ) &
  ( e=; [ $k != default ] && e=ROPEKIT_CUDA_ROTARY_KERNEL=$k
    env $e timeout 30 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda >$L/memcheck-$k.log 2>&1
    echo "memcheck $k rc=$?" >$L/rc-mem-$k.txt ) &
done
wait
for k in default flat tile bulk; do
  cat $L/rc-check-$k.txt >>$L/summary.txt; grep -E "checks,|FAIL" $L/check-$k.log | tail -3 >>$L/summary.txt
  cat $L/rc-mem-$k.txt >>$L/summary.txt; grep -E "ERROR SUMMARY|checks," $L/memcheck-$k.log | tail -2 >>$L/summary.txt
done
stamp "checks done"
ROWS='prefill|Phi|decode'
run_v() {
  local v=$1; shift
  local lp=$NEW; [ "${v#0base}" != "$v" ] && lp=$BASE
  env LD_LIBRARY_PATH=$lp "$@" timeout $(left 10) $B/bench_cuda "$ROWS" >$L/ab/ab-$v-$i.log 2>&1
}
for i in 1 2 3; do
  run_v 0base
  run_v 1new
  stamp "ab round $i"
done
python3 $D/ab_summary.py $L/ab >$L/ab.md 2>&1
PYTHONUNBUFFERED=1 timeout $(left 60) python3 $D/bench_torch.py 'prefill|Phi-2|decode B=256' >$L/torch.log 2>&1; stamp "torch rc=$?"
python3 $D/table.py $L/ab $L/torch.log 0base 1new >$L/table.md 2>&1
tar czf $OUT/logs.tgz -C $L .
cat $L/gpu.txt $L/summary.txt; grep -E "flat|tile|bulk" $L/regs.txt
sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' $L/ab.md
grep -E "^\|" $L/torch.log | cut -c1-140
cat $L/table.md
