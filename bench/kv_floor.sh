#!/usr/bin/env bash
# bench/kv_floor.sh - what the KV budget floor (kv_min_budget) does to quality: the
# streaming perplexity of `h2oserve bench quality` for the server's default policy
# (h2o, 10% heavy + 10% recent of prompt + generation) with each floor, at each
# sequence length, as a ratio to the full cache. The measurement behind the default
# floor (docs/kv-cache.md, "The floor").
#
# Usage: bench/kv_floor.sh [BUILD_DIR]                        (default: build)
# Environment: MODEL (default "default"), TEXT (default models/default/heldout.txt),
#   LENS (sequence lengths L, default "64 128 256 512"; each runs prompt L/8 and
#   generation L - L/8, the shape of docs/quality.md's 64 + 448), FLOORS (default
#   "0 32 64 128 256"), DTYPE (default fp32).
# Prints one table row per length and one JSON line per run.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build}
bin="$build/server/h2oserve"
[ -x "$bin" ] || { echo "kv_floor.sh: $bin not built (./bootstrap.sh $build)" >&2; exit 2; }
model=${MODEL:-default}
text=${TEXT:-models/default/heldout.txt}
lens=${LENS:-64 128 256 512}
floors=${FLOORS:-0 32 64 128 256}
dtype=${DTYPE:-fp32}

printf "%6s" "L"
for f in $floors; do printf " %14s" "floor $f"; done
printf "\n"
jsonl=$(mktemp)
trap 'rm -f "$jsonl"' EXIT
for L in $lens; do
    P=$((L / 8)); G=$((L - P))
    printf "%6d" "$L"
    for f in $floors; do
        line=$("$bin" bench quality --model "$model" --text "$text" --prompt-len "$P" \
            --gen-len "$G" --kv-policy h2o --h2o-heavy-ratio 0.1 --h2o-recent-ratio 0.1 \
            --kv-min-budget "$f" --dtype "$dtype" | grep '"policy": "h2o"')
        echo "$line" >> "$jsonl"
        # B (heavy + recent) and the ratio to full, e.g. "1.0089x (B 128)"
        python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("%8.4fx B%-4d" % (d["ratio_to_full"], d["heavy"] + d["recent"]), end="")' "$line"
    done
    printf "\n"
done
cat "$jsonl"
