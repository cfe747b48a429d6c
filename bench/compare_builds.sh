#!/usr/bin/env bash
# compare_builds.sh - is this tree as fast as another revision? bench_throughput and
# bench_cpu of both builds, run in turn (old, new, old, new, ...) so that the machine's
# drift hits both alike, with each pair's ratio printed and the median of the ratios.
#
# Usage: bench/compare_builds.sh REV [RUNS]        (from the source root, after ./bootstrap.sh)
#   REV   the revision to compare with (built once into build-compare/REV-HASH)
#   RUNS  pairs per benchmark (default 6; the first pair is a warm-up and not counted)
# Env:    BT_ARGS, BC_ARGS override the two benchmarks' arguments.
# Run it on a quiet machine: no build, test or other benchmark at the same time.
set -euo pipefail
cd "$(dirname "$0")/.."

rev=${1:?usage: bench/compare_builds.sh REV [RUNS]}
runs=${2:-6}
hash=$(git rev-parse --short "$rev^{commit}")
old=build-compare/$hash
new=build

BT_ARGS=${BT_ARGS:---model dummy:opt-125m --batch 16 --prompt-len 256 --gen-len 64 --kv-policy full,h2o}
BC_ARGS=${BC_ARGS:---batches 1,16 --dtypes bf16 --decode-steps 32}

if [ ! -x "$old/build/bench/bench_cpu" ]; then
    echo "compare_builds: building $rev ($hash) in $old" >&2
    rm -rf "$old"
    mkdir -p "$old"
    git worktree add --detach -f "$old/src" "$hash" >/dev/null
    meson setup "$old/build" "$old/src" >/dev/null
    ninja -C "$old/build" bench/bench_throughput bench/bench_cpu >/dev/null
    git worktree remove --force "$old/src"
fi
ninja -C "$new" bench/bench_throughput bench/bench_cpu >/dev/null

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
for i in $(seq 1 "$runs"); do
    for side in old new; do
        dir=$old/build
        [ "$side" = new ] && dir=$new
        # shellcheck disable=SC2086  # the argument lists are word lists
        "$dir/bench/bench_throughput" $BT_ARGS >"$log/bt.$side.$i" 2>&1
        # shellcheck disable=SC2086
        "$dir/bench/bench_cpu" $BC_ARGS >"$log/bc.$side.$i" 2>&1
    done
    echo "compare_builds: pair $i of $runs done" >&2
done

python3 - "$log" "$runs" "$hash" <<'EOF'
import glob, json, re, statistics, sys
log, runs, rev = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def throughput(path):
    out = {}
    for line in open(path):
        if line.startswith("{"):
            d = json.loads(line)
            out["bench_throughput %s prefill tok/s" % d["kv_policy"]] = d["prefill_throughput"]
            out["bench_throughput %s decode tok/s" % d["kv_policy"]] = d["decode_throughput"]
    return out

def cpu(path):
    out = {}
    for line in open(path):
        m = re.match(r"(\w+)\s+(prefill|decode)\s+(\d+)\s+([\d.]+)", line)
        if m:
            out["bench_cpu %s %s batch %s tok/s" % m.group(1, 2, 3)] = float(m.group(4))
    return out

pairs = {}
for i in range(2, runs + 1):  # pair 1 is the warm-up
    for read, name in ((throughput, "bt"), (cpu, "bc")):
        o = read("%s/%s.old.%d" % (log, name, i))
        n = read("%s/%s.new.%d" % (log, name, i))
        for k in o:
            if k in n:
                pairs.setdefault(k, []).append(n[k] / o[k])
if not pairs:
    sys.exit("compare_builds: no results (a benchmark failed; see its output)")
print("this tree / %s, %d pairs after one warm-up pair (> 1: this tree is faster)" % (rev, runs - 1))
for k, r in pairs.items():
    print("%-40s median %.3f  pairs %s" % (k, statistics.median(r), " ".join("%.3f" % x for x in r)))
EOF
