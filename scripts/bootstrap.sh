#!/usr/bin/env bash
# Installs what building and testing ropekit needs on Debian/Ubuntu, only what is missing:
# a C compiler, clang (sanitizer build, libFuzzer), cmake, Python venv support, protobuf-c and
# onnx.proto (the ONNX layer), and (with --python) a
# virtual environment .venv with the pinned test packages of tests/requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v clang >/dev/null || need+=(clang)
# clang's sanitizer and libFuzzer runtimes (the ASan/UBSan build and the fuzz smoke need them)
dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
command -v make >/dev/null || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)
# tests only (--python): the AArch64 NEON variant is tested on x86 hosts by cross-compiling and
# running under qemu-user
if [ "${1:-}" = "--python" ] && [ "$(uname -m)" = x86_64 ]; then
    command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
    command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
fi
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# ONNX layer (src/onnx, the `ropekit` tool): protobuf-c, protoc-c, and onnx.proto from libonnx-dev
command -v protoc-c >/dev/null || need+=(protobuf-c-compiler)
[ -e /usr/include/protobuf-c/protobuf-c.h ] || need+=(libprotobuf-c-dev)
[ -e /usr/include/onnx/onnx.proto ] || need+=(libonnx-dev)
# WebGPU tests (--python): Mesa's software adapters, lavapipe (Vulkan) and llvmpipe (OpenGL ES
# through EGL), and the Vulkan loader; wgpu-native itself comes from the pinned wgpu wheel
if [ "${1:-}" = "--python" ]; then
    dpkg -s mesa-vulkan-drivers >/dev/null 2>&1 || need+=(mesa-vulkan-drivers)
    dpkg -s libvulkan1 >/dev/null 2>&1 || need+=(libvulkan1)
    dpkg -s libegl-mesa0 >/dev/null 2>&1 || need+=(libegl-mesa0)
    dpkg -s libegl1 >/dev/null 2>&1 || need+=(libegl1)
    # browser suite (tests/browser): Debian's chromium, driven by Playwright from .venv
    [ -x /usr/lib/chromium/chromium ] || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
    echo "bootstrap: installing ${need[*]}"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi

# ONNX Runtime custom-op library (src/ort): the onnxruntime C API header, from Debian trixie's
# libonnxruntime-dev (1.21) package. Downloaded with a private trixie source list (nothing is
# installed, the system's apt state is untouched) and unpacked into .deps/onnxruntime/, where
# CMake finds it (or pass -DROPEKIT_ORT_INCLUDE_DIR=). Skipped when apt is not available.
ort_deps=.deps/onnxruntime
if [ ! -e "$ort_deps/include/onnxruntime_c_api.h" ] && command -v apt-get >/dev/null \
   && [ -e /usr/share/keyrings/debian-archive-keyring.gpg ]; then
    echo "bootstrap: fetching libonnxruntime-dev (Debian trixie) for the onnxruntime C API header"
    apt_dir="$(mktemp -d)"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
        >"$apt_dir/sources.list"
    touch "$apt_dir/status"
    apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=/nonexistent
              -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
              -o "Dir::State::status=$apt_dir/status" -o APT::Sandbox::User=root -qq)
    if apt-get "${apt_opts[@]}" update >/dev/null \
       && (cd "$apt_dir" && apt-get "${apt_opts[@]}" download libonnxruntime-dev >/dev/null); then
        dpkg-deb -x "$apt_dir"/libonnxruntime-dev_*.deb "$apt_dir/x"
        mkdir -p "$ort_deps"
        rm -rf "$ort_deps/include"
        cp -r "$apt_dir/x/usr/include/onnxruntime" "$ort_deps/include"
        basename "$apt_dir"/libonnxruntime-dev_*.deb >"$ort_deps/PACKAGE"
    else
        echo "bootstrap: could not download libonnxruntime-dev; libropekit_ort will not be built"
    fi
    rm -rf "$apt_dir"
fi

if [ "${1:-}" = "--python" ]; then
    stamp=.venv/.requirements
    if [ ! -x .venv/bin/python ] || ! cmp -s tests/requirements.txt "$stamp"; then
        echo "bootstrap: creating .venv with tests/requirements.txt"
        python3 -m venv .venv
        .venv/bin/python -m pip install -q --disable-pip-version-check -r tests/requirements.txt
        cp tests/requirements.txt "$stamp"
    fi
fi
