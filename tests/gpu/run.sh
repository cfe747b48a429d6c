#!/usr/bin/env bash
# tests/gpu/run.sh - on a machine with an NVIDIA GPU: build from a clean tree with CUDA
# required and -Werror, then run the gpu suite and show its output. CI does not run
# this (its machines have nvcc but no GPU; there the suite reports SKIP).
#
# Usage: tests/gpu/run.sh [BUILD_DIR]     (default: build-gpu, wiped first)
# Exits non-zero when the build or a test fails, and also when the suite skipped:
# on the machine this script is for, a skip means the GPU or its driver is not usable.
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${1:-build-gpu}

# nvcc lives outside PATH in the usual CUDA toolkit install.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || true
fi

# A clean tree: a fresh build directory, never one configured before. Refuse to wipe a
# directory that is not a meson build directory.
if [ -e "$build" ]; then
    if [ ! -d "$build/meson-private" ]; then
        echo "run.sh: $build exists and is not a meson build directory; not wiping it" >&2
        exit 2
    fi
    rm -rf "$build"
fi
start=$(date +%s)
meson setup "$build" -Dcuda=enabled -Dwerror=true
ninja -C "$build"
echo "run.sh: build took $(( $(date +%s) - start )) s"

status=0
meson test -C "$build" --suite gpu --verbose --print-errorlogs || status=$?

# meson counts a skipped test as a success; here it is not.
if grep -q '"result": "SKIP"' "$build/meson-logs/testlog.json"; then
    echo "run.sh: the gpu suite skipped (no usable CUDA device?); see the output above" >&2
    status=1
fi
echo "run.sh: $( [ $status -eq 0 ] && echo PASS || echo FAIL ) in $(( $(date +%s) - start )) s"
exit $status
