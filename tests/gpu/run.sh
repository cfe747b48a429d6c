#!/usr/bin/env bash
# tests/gpu/run.sh - on a machine with an NVIDIA GPU: build from a clean tree with CUDA
# required and -Werror, run the gpu suite and show its output, then the throughput
# benchmark on dummy:opt-6.7b (FlexGen's 512 + 32 workload, full and H2O 20%). CI does
# not run this (its machines have nvcc but no GPU; there the suite reports SKIP).
# About 10 minutes on one H100/H200, most of it the build and the 6.7B dummy weights.
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

# Throughput (docs/benchmarks.md): the same 6.7B dummy model and workload with the full
# cache and with the H2O paper's 20% budget. A batch of 64 fits either way on an
# 80 GB+ GPU; run bench_throughput by hand for other sizes. The benchmark's failure
# fails the script, its speed does not.
if [ $status -eq 0 ]; then
    for policy in full h2o; do
        timeout 240 "$build/bench/bench_throughput" --device cuda --model dummy:opt-6.7b \
            --batch 64 --prompt-len 512 --gen-len 32 --kv-policy "$policy" || status=1
    done
fi
echo "run.sh: $( [ $status -eq 0 ] && echo PASS || echo FAIL ) in $(( $(date +%s) - start )) s"
exit $status
