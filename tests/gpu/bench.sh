#!/usr/bin/env bash
# tests/gpu/bench.sh BUILD_DIR OUT_DIR - run.sh's stage 4: FlexGen's workload (512 + 32
# and 512 + 512, greedy, FlexGen's total throughput) on OPT-6.7B, then OPT-30B, dummy
# weights, each system at the largest batch that fits the GPU:
#   ours          bench_throughput --batch max --kv-policy full,h2o (one load a shape)
#   FlexGen 0.1.7 its own benchmark, _DUMMY_ weights, --percent 100 0 100 0 100 0
#   transformers  the image's, fp16, random init on the GPU (the paper's "HF Accelerate")
# in that order within each shape (bench/peers/gpu_bench.py drives them; gpu_peers.py
# runs the peers). One table of tokens/s with ours / peer goes to OUT_DIR/bench-table.txt
# and every result to OUT_DIR/bench.jsonl as it comes; the log is stdout.
#
# One deadline for the whole stage: BENCH_DEADLINE (seconds since the epoch; run.sh
# sets it from its own start and RUN_SECONDS), or now + BENCH_SECONDS if set, else
# now + 300. A run is not started when less
# than three quarters of its estimate is left, and every run's time limit ends at the
# deadline: the table then says SKIPPED or FAILED for it, with the reason.
#
# Knobs: BENCH_MODELS (opt-6.7b,opt-30b), BENCH_SHAPES (512+32,512+512), BENCH_MAX_SEQS
# (512: the cap on our batch; past a few hundred sequences the throughput of these
# shapes is flat, docs/cuda.md), BENCH_PEERS (flexgen,hf), PEER_PYTHON (python3: the
# image's, with torch). DRY_RUN=1: the same logic on the CPU (docs/cuda.md shows its
# output): dummy:opt-125m, 64 + 8 and 64 + 16, at most 4 sequences, transformers on the
# CPU and FlexGen on the CPU through gpu_peers.py --cpu-shim, in a Python that has
# torch (PEER_PYTHON, else the first of python3, /usr/bin/python3 and
# BUILD_DIR/peers/venv/bin/python that imports it).
# Exits non-zero only when our first run produced nothing; a peer's failure is a row.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: tests/gpu/bench.sh BUILD_DIR OUT_DIR}
out=${2:?usage: tests/gpu/bench.sh BUILD_DIR OUT_DIR}
mkdir -p "$out"

now=$(date +%s)
if [ -n "${BENCH_DEADLINE:-}" ]; then
    deadline=$BENCH_DEADLINE
    why="BENCH_DEADLINE"
elif [ -n "${BENCH_SECONDS:-}" ]; then
    deadline=$((now + BENCH_SECONDS))
    why="BENCH_SECONDS $BENCH_SECONDS"
else
    deadline=$((now + 300))
    why="300 s, not under run.sh"
fi
echo "bench.sh: $((deadline - now)) s for the benchmark ($why)"

has_torch() { "$1" -c 'import torch' >/dev/null 2>&1; }
driver=python3
command -v python3 >/dev/null || driver=/usr/bin/python3
args=(--build "$build" --out "$out" --deadline "$deadline")
if [ -n "${DRY_RUN:-}" ]; then
    peer_py=${PEER_PYTHON:-}
    if [ -z "$peer_py" ]; then
        for p in python3 /usr/bin/python3 "$build/peers/venv/bin/python"; do
            if command -v "$p" >/dev/null && has_torch "$p"; then peer_py=$p; break; fi
        done
    fi
    if [ -z "$peer_py" ]; then
        echo "bench.sh: DRY_RUN: no Python with torch (set PEER_PYTHON); the peers will fail"
        peer_py=python3
    fi
    args+=(--device cpu --models "${BENCH_MODELS:-opt-125m}" --shapes "${BENCH_SHAPES:-64+8,64+16}"
           --max-num-seqs "${BENCH_MAX_SEQS:-4}" --peers "${BENCH_PEERS:-flexgen,hf}"
           --peer-python "$peer_py" --flexgen-cpu-shim)
else
    args+=(--device cuda --models "${BENCH_MODELS:-opt-6.7b,opt-30b}"
           --shapes "${BENCH_SHAPES:-512+32,512+512}" --max-num-seqs "${BENCH_MAX_SEQS:-512}"
           --peers "${BENCH_PEERS:-flexgen,hf}" --peer-python "${PEER_PYTHON:-python3}")
fi
exec "$driver" bench/peers/gpu_bench.py "${args[@]}"
