#!/usr/bin/env bash
# tests/gpu/bench.sh BUILD_DIR OUT_DIR - run.sh's benchmark stage: FlexGen's workload
# (docs/benchmarks.md) on the CUDA backend, dummy:opt-6.7b, 512 + 32, full and H2O
# 20%, a batch of 64 (it fits either way on an 80 GB+ GPU).
set -uo pipefail
build=$1
out=$2
status=0
for policy in full h2o; do
    timeout 240 "$build/bench/bench_throughput" --device cuda --model dummy:opt-6.7b \
        --batch 64 --prompt-len 512 --gen-len 32 --kv-policy "$policy" || status=1
done
exit $status
