#!/usr/bin/env bash
# tests/gpu/run.sh - the one prepared call on a GPU machine (docs/cuda.md, "The GPU
# run"), in the order of what matters most, each stage timed:
#   1. deps   what the machine lacks, from tests/gpu/carry/ (tests/gpu/deps.sh; the
#             folder is made here by tests/gpu/prepare.sh and travels with the tree)
#   2. build  a fresh build directory, CUDA required, without -Werror (a newer
#             compiler there must not fail the run; its warnings are printed)
#   3. suite  the gpu suite: every kernel against its host reference and the whole
#             CUDA backend against the CPU backend
#   4. bench  FlexGen's workload on ours, FlexGen and transformers (tests/gpu/bench.sh)
# Everything goes to $OUT/log as it happens (OUT: the device machine's result folder;
# default ./gpu-out), so a run cut short still leaves what it did. CI does not run
# this (its machines have nvcc but no GPU; there the suite reports SKIP).
#
# Usage: tests/gpu/run.sh [BUILD_DIR]     (default: build-gpu, wiped first)
# Exits non-zero when the build or a test fails, and also when the suite skipped: on
# the machine this script is for, a skip means the GPU or its driver is not usable.
# A peer that fails in the benchmark is reported, not fatal.
set -uo pipefail
cd "$(dirname "$0")/../.."

build=${1:-build-gpu}
out=${OUT:-gpu-out}
mkdir -p "$out"
exec > >(tee -a "$out/log") 2>&1
t0=$(date +%s)
stage() { echo "run.sh: [$(( $(date +%s) - t0 )) s] $*"; }
# The whole call's budget (RUN_SECONDS, 480: the 8 minutes the GPU run may take; the
# device session has 15 and must be able to run it twice): the benchmark stops
# starting runs 20 s before it ends, whatever the earlier stages took.
export BENCH_DEADLINE=${BENCH_DEADLINE:-$(( t0 + ${RUN_SECONDS:-480} - 20 ))}

stage "1/4 deps"
# shellcheck source=tests/gpu/deps.sh
source tests/gpu/deps.sh || { stage "FAIL: the dependencies"; exit 1; }
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || true
fi

stage "2/4 build"
# A clean tree: a fresh build directory, never one configured before. Refuse to wipe a
# directory that is not a meson build directory.
if [ -e "$build" ]; then
    if [ ! -d "$build/meson-private" ]; then
        echo "run.sh: $build exists and is not a meson build directory; not wiping it" >&2
        exit 2
    fi
    rm -rf "$build"
fi
if ! meson setup "$build" -Dcuda=enabled -Dwerror=false || ! ninja -C "$build"; then
    stage "FAIL: the build"
    exit 1
fi

stage "3/4 suite"
status=0
meson test -C "$build" --suite gpu --verbose --print-errorlogs || status=$?
# meson counts a skipped test as a success; here it is not.
if grep -q '"result": "SKIP"' "$build/meson-logs/testlog.json"; then
    echo "run.sh: the gpu suite skipped (no usable CUDA device?); see the output above" >&2
    status=1
fi
cp "$build/meson-logs/testlog.json" "$out/gpu-testlog.json" 2>/dev/null

stage "4/4 bench"
# The benchmark's failure fails the script, its speed does not; a peer's failure is
# reported in its table and is not fatal.
bash tests/gpu/bench.sh "$build" "$out" || status=1

stage "$( [ $status -eq 0 ] && echo PASS || echo FAIL )"
exit $status
