"""plots_data.py - turn bench/plots.sh's JSON lines into gnuplot data files.

Usage: python3 bench/plots_data.py RUNS.jsonl OUT_DIR [PEERS.jsonl]

RUNS.jsonl holds bench_throughput's JSON lines, each tagged with "sweep" ("batch"
or "length"). For each sweep and KV policy it writes OUT_DIR/<sweep>-<policy>.dat:
x (batch size, or prompt length) and total throughput, sorted by x. A peers file
(one object per run: "system", "batch", "prompt_len", "gen_len",
"total_throughput"), when it exists, adds <sweep>-<system>.dat for the runs that
match a sweep's fixed settings, so a peer's points sit on the same axes.
"""

import json
import os
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def write(out_dir, sweep, name, points):
    path = os.path.join(out_dir, f"{sweep}-{name}.dat")
    best = {}  # a point both sweeps share (batch 8, prompt 512) ran twice: the best run
    for x, y in points:
        best[x] = max(y, best.get(x, y))
    with open(path, "w") as f:
        f.write(f"# {sweep} {name}: x total_throughput\n")
        for x in sorted(best):
            f.write(f"{x} {best[x]:.3f}\n")


def main():
    runs_path, out_dir = sys.argv[1], sys.argv[2]
    peers_path = sys.argv[3] if len(sys.argv) > 3 else ""
    runs = load(runs_path)
    series = {}
    for r in runs:
        x = r["batch"] if r["sweep"] == "batch" else r["prompt_len"]
        series.setdefault((r["sweep"], r["kv_policy"]), []).append(
            (x, r["total_throughput"]))
    for (sweep, name), points in series.items():
        write(out_dir, sweep, name, points)
    if not peers_path or not os.path.exists(peers_path):
        return
    # A peer point belongs to a sweep when its fixed settings match that sweep's.
    fixed = {}
    for r in runs:
        key = "batch" if r["sweep"] == "batch" else "length"
        if key == "batch":
            fixed.setdefault(key, (r["prompt_len"], r["gen_len"]))
        else:
            fixed.setdefault(key, (r["batch"], r["gen_len"]))
    peer_series = {}
    for p in load(peers_path):
        if "batch" in fixed and (p["prompt_len"], p["gen_len"]) == fixed["batch"]:
            peer_series.setdefault(("batch", p["system"]), []).append(
                (p["batch"], p["total_throughput"]))
        if "length" in fixed and (p["batch"], p["gen_len"]) == fixed["length"]:
            peer_series.setdefault(("length", p["system"]), []).append(
                (p["prompt_len"], p["total_throughput"]))
    for (sweep, name), points in peer_series.items():
        write(out_dir, sweep, name, points)


if __name__ == "__main__":
    main()
