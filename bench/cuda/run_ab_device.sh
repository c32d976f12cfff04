#!/usr/bin/env bash
# A/B on the GPU machine (session s14): copy this script (as .dev/<branch>/dev1.sh), a tree of the committed sources to .dev/<branch>/tree
# and the changed file to .dev/<branch>/rotary_var.cu, carry .dev/<branch>, run this script:
# both trees built and checked, the 16-bit rows timed alternately, then the full bench and
# memcheck of tree/. Logs: $OUT/logs1.tgz.
set -u
L=/tmp/o; mkdir -p $L/split $L/var
cd "$(dirname "$0")"
rm -rf var; cp -r tree var; cp rotary_var.cu var/src/cuda/rotary.cu
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee $L/gpu.txt
nvcc --version | tail -2 >> $L/gpu.txt
for t in tree var; do
  ( cd $t && cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DROPEKIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >$L/build-$t.log 2>&1 &&
    cmake --build build-cuda -j8 --target check_cuda bench_cuda >>$L/build-$t.log 2>&1; echo "build $t rc=$?" ) &
done; wait
( cd tree && timeout 120 ./build-cuda/check_cuda >$L/split/check.log 2>&1; echo "split check rc=$?"; grep -E "checks,|FAIL" $L/split/check.log | tail -3 )
( cd var && timeout 120 ./build-cuda/check_cuda >$L/var/check.log 2>&1; echo "var check rc=$?"; grep -E "checks,|FAIL" $L/var/check.log | tail -3 )
ROWS='S=8192 32+8 x128 bfloat16|S=8192 32+8 x128 float16/float32|S=4096 32+8 x128 bfloat16|S=4096 32+8 x128 float16|B=4 S=2048 16+8 x128 bfloat16|B=4 S=2048 16+8 x128 float16|R32 float16|R32 bfloat16|decode B=256'
for i in 1 2 3; do for t in tree var; do
  ( cd $t && timeout 60 ./build-cuda/bench_cuda "$ROWS" > $L/ab-$t-$i.log 2>&1 )
done; done
( cd tree && timeout 240 ./build-cuda/bench_cuda >$L/split/bench.log 2>&1; echo "split bench rc=$?" )
( cd tree && timeout 200 compute-sanitizer --tool memcheck --print-limit 20 ./build-cuda/check_cuda >$L/split/memcheck.log 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|checks," $L/split/memcheck.log | tail -3 )
tar czf "$OUT/logs1.tgz" -C $L .
for f in $L/ab-*-1.log; do echo "== $f"; grep -E "^\|" $f | cut -c1-150 | head -14; done
