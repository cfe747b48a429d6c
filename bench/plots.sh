#!/usr/bin/env bash
# bench/plots.sh - the throughput charts of docs/benchmarks.md, in one command:
# FlexGen's total throughput (bench_throughput) against batch size and against prompt
# length, for the full cache, H2O 20% and the recent window (local), plus the peers
# where bench/peers has left results. Writes PNGs (gnuplot) and the data beside them.
#
# Usage: bench/plots.sh [BUILD_DIR] [OUT_DIR]      (default: build, docs/plots)
# Environment: MODEL (default dummy:opt-125m), DTYPE (default: the build's default),
#   BATCHES (default "1 2 4 8 16 32"), PROMPTS (default "128 256 512 1024"),
#   GEN (tokens generated, default 32), LEN_BATCH (batch of the length sweep, 8),
#   PEERS (a JSON-lines file of peer runs, default OUT_DIR/peers.jsonl if present:
#   one object per run with "system", "batch", "prompt_len", "gen_len",
#   "total_throughput"), PEER_SYSTEMS (e.g. "hf" or "hf,ct2": run bench/peers/run.py
#   at every point of both sweeps in the sweeps' dtype first, writing PEERS afresh;
#   CTranslate2 has no bf16 on the CPU).
# REPLOT=1 only redraws from the data an earlier run left in OUT_DIR.
# It installs gnuplot (Debian's gnuplot-nox) when it is missing. A sweep takes a few
# minutes on two cores; nothing else should run meanwhile, or the numbers are noise.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
out=${2:-docs/plots}
model=${MODEL:-dummy:opt-125m}
batches=${BATCHES:-1 2 4 8 16 32}
prompts=${PROMPTS:-128 256 512 1024}
gen=${GEN:-32}
len_batch=${LEN_BATCH:-8}
bench="$build/bench/bench_throughput"
[ -x "$bench" ] || { echo "plots.sh: $bench not built (./bootstrap.sh $build)" >&2; exit 2; }

if ! command -v gnuplot >/dev/null; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        gnuplot-nox >/dev/null
fi
mkdir -p "$out"
runs="$out/throughput.jsonl"
[ -n "${REPLOT:-}" ] || : >"$runs"
dtype=()
[ -n "${DTYPE:-}" ] && dtype=(--dtype "$DTYPE")

# One bench_throughput run; its JSON line goes to $runs, tagged with the sweep.
run() {
    local sweep=$1
    shift
    "$bench" --model "$model" "${dtype[@]}" "$@" | grep '^{' |
        sed "s/^{/{\"sweep\": \"$sweep\", /" >>"$runs"
}
for policy in full h2o local; do
    [ -n "${REPLOT:-}" ] && break
    for b in $batches; do
        echo "plots.sh: $policy batch $b (512 + $gen)" >&2
        run batch --kv-policy "$policy" --batch "$b" --prompt-len 512 --gen-len "$gen"
    done
    for p in $prompts; do
        echo "plots.sh: $policy prompt $p (batch $len_batch)" >&2
        run length --kv-policy "$policy" --batch "$len_batch" --prompt-len "$p" --gen-len "$gen"
    done
done

peers=${PEERS:-$out/peers.jsonl}
if [ -n "${PEER_SYSTEMS:-}" ] && [ -z "${REPLOT:-}" ]; then
    peer_dtype=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["dtype"])' "$runs")
    : >"$peers"
    peer() {
        python3 bench/peers/run.py --build "$build" --model "$model" --peers "$PEER_SYSTEMS" \
            --dtype "$peer_dtype" --jsonl "$peers" "$@" >&2
    }
    for b in $batches; do
        echo "plots.sh: peers batch $b (512 + $gen)" >&2
        peer --batch "$b" --prompt-len 512 --gen-len "$gen"
    done
    for p in $prompts; do
        echo "plots.sh: peers prompt $p (batch $len_batch)" >&2
        peer --batch "$len_batch" --prompt-len "$p" --gen-len "$gen"
    done
fi
python3 bench/plots_data.py "$runs" "$out" "$peers"

# One chart per sweep: a line per policy (and per peer system found).
chart() {
    local sweep=$1 xlabel=$2 title=$3 logx=$4
    local plot="" f
    for f in "$out/$sweep"-*.dat; do
        [ -s "$f" ] || continue
        local name
        name=$(basename "$f" .dat)
        name=${name#"$sweep"-}
        plot+="${plot:+, }'$f' using 1:2 with linespoints lw 2 pt 7 title '$name'"
    done
    gnuplot <<EOF
set terminal pngcairo size 900,560 font ',11' noenhanced
set output '$out/throughput-vs-$sweep.png'
set title '$title'
set xlabel '$xlabel'
set ylabel 'total throughput (tokens/s, flex_opt.py)'
set grid
set key top left
$( [ "$logx" = 1 ] && echo "set logscale x 2" )
plot $plot
EOF
}
chart batch "batch size (512 + $gen tokens)" \
    "$model: throughput vs batch size ($(uname -m), $(nproc) cores)" 1
chart length "prompt length (batch $len_batch, + $gen generated)" \
    "$model: throughput vs prompt length ($(uname -m), $(nproc) cores)" 1
echo "plots.sh: wrote $out/throughput-vs-batch.png and $out/throughput-vs-length.png" >&2
