#!/usr/bin/env bash
# tests/fuzz/run.sh - fuzz the HTTP request path with libFuzzer under ASan+UBSan.
#
# Usage: tests/fuzz/run.sh [SECONDS] [BUILD_DIR]     (defaults: 60, build-fuzz)
# Needs clang with libFuzzer; on Debian 12: apt-get install clang libclang-rt-14-dev
# libomp-14-dev (the runtime is only a Recommends of clang; the project's OpenMP
# check needs libomp with clang).
# Seeds are read from tests/fuzz/corpus (the first byte of each picks the feed sizes
# and limits, see fuzz_http.c), tokens from tests/fuzz/http.dict; inputs the fuzzer finds go to
# BUILD_DIR/fuzz-corpus and a failing input to BUILD_DIR/fuzz-artifacts.
# Exits non-zero when the fuzzer finds a crash, a leak, UB or a timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."

secs=${1:-60}
build=${2:-build-fuzz}

if [ ! -f "$build/build.ninja" ]; then
    CC=clang meson setup "$build" -Dfuzz=true -Db_sanitize=none -Dbuildtype=debugoptimized \
        -Dcuda=disabled
else
    meson configure "$build" -Dfuzz=true
fi
ninja -C "$build" tests/fuzz/fuzz_http >&2

mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts"
status=0
"$build/tests/fuzz/fuzz_http" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/" -dict=tests/fuzz/http.dict \
    "$build/fuzz-corpus" tests/fuzz/corpus || status=$?
if [ "$status" -ne 0 ]; then
    echo "fuzz_http: finding (exit $status); input under $build/fuzz-artifacts/" >&2
fi
exit "$status"
