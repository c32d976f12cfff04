#!/usr/bin/env bash
# One call on the GPU machine (device tool): the WebGPU conformance test and benchmark on the
# GPU's Vulkan driver (and its EGL/OpenGL ES driver), from binaries built here and carried.
# Prepare here (once): the Vulkan/EGL loaders as Debian packages in .gl/ (see
# /work/.library/device/README.md) and the binaries in build-device/:
#   mkdir -p build-device && cp build/tests/webgpu/test_webgpu build/bench_webgpu build-device/ &&
#   cp -L build/libropekit.so.0 build/libropekit_webgpu.so.0 build/wgpu-native/lib/libwgpu_native.so build-device/
# Run (device tool, carry [".gl", "build-device"]): bash bench/webgpu/run_device.sh [test] [gl] [bench]
set -u
OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
modes=" ${*:-test gl bench} "
want() { [[ "$modes" == *" $1 "* ]]; }
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export LD_LIBRARY_PATH="$PWD/build-device${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export ROPEKIT_CASES_DIR="$PWD/tests/cases" ROPEKIT_WEBGPU_REQUIRE=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
if want test; then
  ROPEKIT_WEBGPU_BACKEND=vulkan timeout 300 build-device/test_webgpu >"$OUT/test_vulkan.log" 2>&1
  echo "test_webgpu vulkan rc=$?"; grep -v "^ok" "$OUT/test_vulkan.log" | tail -30
fi
if want gl; then
  # NVIDIA's GL driver: wgpu's GL backend cannot build compute pipelines there (wgpu issue
  # 4751); the context refuses the adapter, the test says why and exits 77 (skipped)
  ROPEKIT_WEBGPU_REQUIRE=0 ROPEKIT_WEBGPU_BACKEND=gl timeout 300 build-device/test_webgpu >"$OUT/test_gl.log" 2>&1
  echo "test_webgpu gl rc=$?"; grep -v "^ok" "$OUT/test_gl.log" | tail -30
fi
if want bench; then
  timeout 200 build-device/bench_webgpu --backend vulkan --reps 20 >"$OUT/bench_vulkan.log" 2>&1
  echo "bench_webgpu vulkan rc=$?"; cat "$OUT/bench_vulkan.log"
fi
