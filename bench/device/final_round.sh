#!/bin/bash
# Final check of merged main on the device (see build_final.sh): every CUDA check with each
# kernel knob, memcheck, the CPU bit tests on the Xeon, CUDA A/B (3 alternating rounds) and
# CPU A/B (ropekit_bench_ab) base vs final.
set -u
D=$(cd "$(dirname "$0")" && pwd); B=$D/bin; L=$OUT
NEW=$D/lib; BASE=$D/lib-base
export LD_LIBRARY_PATH=$NEW
echo "final $(cat $D/FINAL) base $(cat $D/BASE)"
t0=$(date +%s)
( for k in "" ROPEKIT_CUDA_ROTARY_KERNEL={flat,tile,bulk,decode} ROPEKIT_CUDA_MROPE={tile,pipe,pipe56}; do
    env $k timeout 60 $B/check_cuda > $L/check-${k##*=}.log 2>&1
    echo "check [${k:-default}] rc=$? $(grep -E 'checks,' $L/check-${k##*=}.log | tail -1)"
  done > $L/check-summary.txt ) &
( timeout 120 compute-sanitizer --tool memcheck --print-limit 20 $B/check_cuda > $L/memcheck.log 2>&1
  echo "memcheck default rc=$? $(grep 'ERROR SUMMARY' $L/memcheck.log)" > $L/memcheck-summary.txt ) &
( taskset -c 4-7 timeout 120 $B/test_threads > $L/test_threads.log 2>&1; echo "test_threads rc=$? $(tail -1 $L/test_threads.log)" > $L/cpu-tests.txt
  taskset -c 4-7 timeout 120 $B/test_variants > $L/test_variants.log 2>&1; echo "test_variants rc=$? $(tail -1 $L/test_variants.log)" >> $L/cpu-tests.txt ) &
wait
cat $L/check-summary.txt $L/memcheck-summary.txt $L/cpu-tests.txt
echo "t=$(( $(date +%s) - t0 ))s checks done"
mkdir -p /tmp/ab
for i in 1 2 3; do
  LD_LIBRARY_PATH=$BASE:$NEW timeout 40 $B/bench_cuda > /tmp/ab/ab-0base-$i.log 2>&1
  timeout 40 $B/bench_cuda > /tmp/ab/ab-1final-$i.log 2>&1
done
python3 $D/ab_summary.py /tmp/ab > $L/cuda-ab.md 2>&1; tar -C /tmp -czf $L/cuda-ab-logs.tgz ab
echo "t=$(( $(date +%s) - t0 ))s cuda ab done"
ROWS="llama:f32 llama:f16 llama:bf16 bnsh:f32 bnsh:f16 bnsh:bf16 phi:f16 mrope:f32 mrope:bf16 qk:f16 qk:bf16 rg:f16 rg:bf16 dec:f32 dec:bf16 dec64:f32"
LIBS=base=$BASE/libropekit.so.0,final=$NEW/libropekit.so.0
[ -f $D/EXTRA ] && LIBS=$(cat $D/EXTRA)=$D/lib-extra/libropekit.so.0,$LIBS
for v in avx512 avx2; do
  taskset -c 2,3 timeout 60 $B/ropekit_bench_ab $LIBS $v 0.6 16 16 1 $ROWS qwen3:bf16 > $L/cpu-ab-$v.log 2>&1
  echo "cpu ab $v rc=$?"
done
# warm (buffers reused: the kernel's own speed, what small and in-cache calls see) and in-L2 rows
HOT="llama:f32 llama:f16 llamanp:f16 qwen3:f16 phi:f16 phi:f32 bnsh:f16 bnsh:f32"
L2="llama64:f16 bnsh64:f16 bnsh64:f32 bnsh64:bf16 phi64:f16 mrope64:f16"
for v in avx512 avx2; do
  ROPEKIT_BENCH_HOT=1 taskset -c 2,3 timeout 60 $B/ropekit_bench_ab $LIBS $v 0.6 16 16 1 $HOT $L2 > $L/cpu-ab-hot-$v.log 2>&1
  echo "cpu ab hot $v rc=$?"
done
echo "t=$(( $(date +%s) - t0 ))s cpu ab done"
if [ -d $D/models ]; then   # the CPU tables of the final build (bench_ort.py: ropekit beside onnxruntime)
  CPU="Intel Xeon, 5th gen Scalable (Emerald Rapids: CPUID family 6 model 207), 16 vCPUs of a KVM guest"
  for v in avx512 avx2; do
    ROPEKIT_LIB=$NEW/libropekit.so.0 ROPEKIT_CPU_VARIANT=$v timeout 60 taskset -c 2,3 python3 bench/bench_ort.py \
      --bench $B/ropekit_bench --time 0.3 --threads 1 --quick --commit "$(cat $D/FINAL)" --models $D/models \
      --cpu-name "$CPU" --array-offset 16 --out $L/table-$v-16.md > $L/table-$v-16.log 2>&1
    echo "table $v rc=$?"; sed -n '/^## Targets/,$p' $L/table-$v-16.md
  done
  echo "t=$(( $(date +%s) - t0 ))s tables done"
fi
cat $L/cuda-ab.md
cat $L/cpu-ab-*.log
