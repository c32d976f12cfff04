#!/usr/bin/env bash
# A/B device run (issue 16 step 5, bench/results-webgpu.md): builds of libropekit_webgpu side by side.
# Prepare here, under $D (default .dev/w16-speed, git-ignored, passed to the device tool as carry):
#   .gl/ (Vulkan loader debs, see run_device.sh), lib/libwgpu_native.so, whl/onnxruntime_ep_webgpu-*.whl,
#   bench_ort_webgpu.py, and one folder per build (test_webgpu, bench_webgpu, libropekit.so.0,
#   libropekit_webgpu.so.0; a folder with only libropekit_webgpu.so.0 borrows the rest via LIBDIRS).
# Example: bash run_device_ab.sh tv2 "tv2 tv1" tv1 test bench-nocpu; bash run_device_ab.sh ort "" x ort
set -u
D=${D:-.dev/w16-speed}
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
name=$1 libs=$2 bin=$3; shift 3
modes=" $* "
if [ ! -e /tmp/.gl_done ]; then for f in $D/.gl/*.deb; do dpkg -x "$f" /; done; ldconfig; touch /tmp/.gl_done;
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; fi
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export ROPEKIT_CASES_DIR="$PWD/tests/cases" ROPEKIT_WEBGPU_REQUIRE=1
lp=""; for l in $libs; do lp="$lp:$PWD/$D/$l"; done; lp="${lp#:}:$PWD/$D/lib"
if [[ "$modes" == *" test "* ]]; then
  LD_LIBRARY_PATH="$lp" ROPEKIT_WEBGPU_BACKEND=vulkan timeout 200 $D/$bin/test_webgpu >"$OUT/test_$name.log" 2>&1
  echo "test_webgpu $name rc=$?"; grep -v "^ok" "$OUT/test_$name.log" | tail -3
fi
for m in bench bench-nocpu; do
  if [[ "$modes" == *" $m "* ]]; then
    extra=""; [ $m = bench-nocpu ] && extra=--no-cpu
    LD_LIBRARY_PATH="$lp" timeout 150 $D/$bin/bench_webgpu --backend vulkan --reps 20 $extra >"$OUT/bench_$name.log" 2>&1
    echo "bench_webgpu $name rc=$?"; cut -d'|' -f2,3,6,8,9,10,11 "$OUT/bench_$name.log" | tail -12
  fi
done
if [[ "$modes" == *" ort "* ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $D/whl/*.whl
  PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 timeout 150 python3 $D/bench_ort_webgpu.py --reps 30 --profile >"$OUT/ort.log" 2>&1
  echo "ort rc=$?"; grep "^|" "$OUT/ort.log" | cut -d'|' -f2-6
fi
