#!/usr/bin/env bash
# tests/fuzz/run.sh - fuzz every parser of untrusted input with libFuzzer under
# ASan+UBSan: HTTP requests, completions bodies (parse -> engine request ->
# response), Batch input lines, multipart bodies, and JSON bodies (POST /v1/batches).
#
# Usage: tests/fuzz/run.sh [SECONDS] [BUILD_DIR] [TARGET...]
#   SECONDS    the whole budget, split evenly between the targets (default 150)
#   BUILD_DIR  default build-fuzz
#   TARGET     http, cmpl, batch_line, multipart, json (default: all)
# Needs clang with libFuzzer and, for cJSON's source, dpkg-source; on Debian 12:
#   apt-get install clang libclang-rt-14-dev libomp-14-dev dpkg-dev
# (the runtime is only a Recommends of clang; the project's OpenMP check needs libomp
# with clang). cJSON is compiled instrumented from Debian's source of the installed
# version, fetched once into BUILD_DIR/cjson (tests/fuzz/cjson_src.sh).
# Seeds are read from tests/fuzz/corpus/TARGET, tokens from tests/fuzz/TARGET.dict;
# inputs the fuzzer finds go to BUILD_DIR/fuzz-corpus/TARGET and a failing input to
# BUILD_DIR/fuzz-artifacts/TARGET-*. Prints one line per target with its exec count.
# Exits non-zero when a fuzzer finds a crash, a leak, UB or a timeout.
set -euo pipefail
cd "$(dirname "$0")/../.."

secs=${1:-150}
build=${2:-build-fuzz}
shift $(($# < 2 ? $# : 2))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(http cmpl batch_line multipart json)
each=$((secs / ${#targets[@]}))
[ "$each" -ge 1 ] || each=1

cjson=$(bash tests/fuzz/cjson_src.sh "$build/cjson")
if [ ! -f "$build/build.ninja" ]; then
    CC=clang meson setup "$build" -Dfuzz=true -Dcjson_src="$cjson" -Db_sanitize=none \
        -Dbuildtype=debugoptimized -Dcuda=disabled >&2
else
    meson configure "$build" -Dfuzz=true -Dcjson_src="$cjson" >&2
fi
ninja -C "$build" $(printf 'tests/fuzz/fuzz_%s ' "${targets[@]}") >&2

mkdir -p "$build/fuzz-artifacts"
status=0
for t in "${targets[@]}"; do
    mkdir -p "$build/fuzz-corpus/$t"
    log="$build/fuzz-$t.log"
    rc=0
    "$build/tests/fuzz/fuzz_$t" -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" \
        -dict="tests/fuzz/$t.dict" "$build/fuzz-corpus/$t" "tests/fuzz/corpus/$t" \
        > "$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    if [ "$rc" -ne 0 ]; then
        status=1
        echo "fuzz_$t: FINDING (exit $rc) after ${each}s; input under $build/fuzz-artifacts/, log $log"
        tail -60 "$log"
    else
        echo "fuzz_$t: ${each}s, ${execs:-?} execs, ${cov:-cov: ?}, no finding"
    fi
done
exit "$status"
