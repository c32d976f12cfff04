#!/bin/bash
cd "$(dirname "$0")"
mkdir -p "$OUT"
{
date -u; nproc; lscpu | grep "Model name"; lscpu | grep -o "avx512_fp16\|avx512_bf16" | sort -u | tr '\n' ' '; echo
./test_variants 2>&1 | tail -2
./test_threads 2>&1 | tail -1
L=base=./base.so,new=./new.so
taskset -c 2,3 ./ropekit_bench_ab $L avx512 4 16 16 1 qk:f16 qk:bf16 qk:f32 qk:f16 2>&1 | tail -5
ROPEKIT_BENCH_HOT=1 taskset -c 2,3 ./ropekit_bench_ab $L avx512 2 16 16 1 qk4:f16 qk4:bf16 qk4:f32 2>&1 | tail -4
taskset -c 2,3 ./ropekit_bench_ab $L avx512 3 0 0 1 qk:f16 2>&1 | tail -2
taskset -c 2,3 ./ropekit_bench_ab $L avx2 3 16 16 1 qk:f16 2>&1 | tail -2
} 2>&1 | tee "$OUT/qk-round.log"
