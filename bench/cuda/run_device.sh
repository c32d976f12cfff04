#!/usr/bin/env bash
# One call on the GPU machine: build the CUDA targets, run the check (plain and under
# compute-sanitizer memcheck), the benchmark and the PyTorch peers. Logs go to $OUT.
# Usage (device tool): bash bench/cuda/run_device.sh [all | check check1 bench torch prof variants]
#   check1: the check without memcheck; variants: the benchmark knobs of src/cuda on
#   the rows RK_ROWS; RK_CMAKE_ARGS: extra cmake arguments (-DCMAKE_CUDA_ARCHITECTURES=90 builds
#   faster for experiments).
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
modes=" ${*:-all} "
want() { [[ "$modes" == *" all "* || "$modes" == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DROPEKIT_CUDA=ON ${RK_CMAKE_ARGS:-} >"$OUT/build.log" 2>&1 &&
  cmake --build build-cuda -j16 --target check_cuda bench_cuda >>"$OUT/build.log" 2>&1 ||
  { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
echo "build ok"
if want check || want check1; then  # check1: without memcheck
  timeout 120 ./build-cuda/check_cuda >"$OUT/check.log" 2>&1; echo "check_cuda rc=$?" | tee -a "$OUT/check.log"
  grep -v "^ok" "$OUT/check.log"
fi
if want check; then
  timeout 240 compute-sanitizer --tool memcheck --print-limit 20 ./build-cuda/check_cuda >"$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|FAIL|checks," "$OUT/memcheck.log" | tail -5
fi
if want bench; then
  timeout 240 ./build-cuda/bench_cuda >"$OUT/bench.log" 2>&1; echo "bench rc=$?"
fi
if want torch; then
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/cuda/bench_torch.py >"$OUT/torch.log" 2>&1; echo "torch rc=$?"
fi
if want variants; then  # benchmark knobs (src/cuda) on some rows, one line per row
  # RK_VARIANTS: space-separated variants, each a comma-separated list of VAR=value ("-": none)
  for v in ${RK_VARIANTS:-- ROPEKIT_CUDA_HINTS=0 ROPEKIT_CUDA_ROTARY_KERNEL=flat ROPEKIT_CUDA_ROTARY_KERNEL=tile}; do
    [ "$v" = - ] && v=""
    env ${v//,/ } timeout 60 ./build-cuda/bench_cuda "${RK_ROWS:-S=8192|S=4096}" >"$OUT/var.log" 2>&1
    echo "== ${v:-default} rc=$?"; cat "$OUT/var.log" >>"$OUT/variants.log"
    sed -e 's/bfloat16/bf16/g; s/float16/f16/g; s/float32/f32/g' "$OUT/var.log" |
      awk -F'|' '/^\| [A-Za-z]/ && !/shape/ {printf "%-36.36s %-5.5s %-5.5s %7.2f %s\n", $2, $3, $4, $5, $9}'
  done
fi
if want prof; then  # Nsight Compute, full section set, one launch per row (RK_PROF_ROWS: ';'-separated)
  IFS=';' read -ra rows <<<"${RK_PROF_ROWS:-QKNorm DS-V4 2048 tok 128x512 rope64 fp8 bfloat16;Llama-3-8B prefill B=1 S=8192 32+8 x128 bfloat16/float32}"
  for f in "${rows[@]}"; do
    echo "==== row: $f" >>"$OUT/ncu.log"
    timeout 200 ncu --clock-control none -s 3 -c 1 -k regex:'qknorm|rotary|regroup' --set full \
      ./build-cuda/bench_cuda "$f" >>"$OUT/ncu.log" 2>&1
    echo "ncu rc=$? ($f)"
  done
  grep -E "^==== row|qknorm|rotary|regroup|Memory Throughput|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Issue Slots Busy|L1/TEX Hit|L2 Hit" "$OUT/ncu.log" | head -120
fi
cat "$OUT/bench.log" 2>/dev/null | tail -62
tail -12 "$OUT/torch.log" 2>/dev/null
