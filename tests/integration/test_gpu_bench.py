#!/usr/bin/env python3
"""test_gpu_bench.py - tests/gpu/bench.sh's driver and the peers' helpers, no GPU.

bench/peers/gpu_bench.py runs ours, FlexGen and transformers in order under one
deadline and writes bench.jsonl and bench-table.txt as results come; it must report
a peer that fails, hangs or has no time left as a row, never stop on it. Here the
children are stand-ins (a bench_throughput that prints two JSON lines or fails, a
"Python" that answers as gpu_peers.py would, prints an error, or hangs), so this
checks the driver's logic on CI: the order, the peers' batch bound (our full batch,
or the cap when ours failed), the time limit that stops a hung peer (its whole
process group), the runs skipped at the deadline, the ratios, the exit status, and
the one retry after an out-of-memory (a peer at 70% of its batch; ours, for the
policy still missing, at --gpu-memory-utilization 0.8). It
also checks gpu_peers.py's FlexGen helpers: its log (a file FlexGen 0.1.7's own
write_benchmark_log wrote, bench/peers/testdata), its command line and its memory
sizing. The real peers run in the dry run (DRY_RUN=1 tests/gpu/bench.sh, docs/cuda.md).
TAP output. Usage: test_gpu_bench.py
"""
import json
import os
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PEERS = os.path.join(REPO, "bench", "peers")
sys.path.insert(0, PEERS)
import gpu_peers  # noqa: E402

results = []


def tap(ok, name, detail=""):
    results.append(ok)
    print(("ok" if ok else "not ok") + f" {len(results)} - {name}")
    if not ok and detail:
        for line in str(detail).splitlines()[:40]:
            print("# " + line)
    sys.stdout.flush()


def script(path, body):
    with open(path, "w") as f:
        f.write("#!/usr/bin/env bash\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


# A bench_throughput that answers --batch max for full (batch 7) and h2o (batch 9, cap).
OURS_OK = r'''
P=0; G=0
while [ $# -gt 0 ]; do case $1 in --prompt-len) P=$2;; --gen-len) G=$2;; esac; shift; done
echo "model dummy:opt-125m, backend cpu (bf16) ..."
for pol in full h2o; do
  b=7; fit=7; [ $pol = h2o ] && b=9 && fit=40
  echo "{\"bench\": \"throughput\", \"model\": \"dummy:opt-125m\", \"backend\": \"cpu\", \"dtype\": \"bf16\", \"prompt_len\": $P, \"gen_len\": $G, \"kv_policy\": \"$pol\", \"batch\": $b, \"batch_rule\": \"max\", \"batch_fit\": $fit, \"prefill_latency_s\": 1.0, \"decode_latency_s\": 1.0, \"total_throughput\": $((b * 10))}"
done
'''
OURS_FAIL = 'echo "bench_throughput: CUDA backend: no GPU found (no NVIDIA driver or no device); use --device cpu" >&2; exit 1\n'
# A peer "Python": argv[1] is gpu_peers.py, argv[2] the peer; echoes its --max-batch.
PEER = r'''
sys=$2; shift 2; max=0
while [ $# -gt 0 ]; do case $1 in --max-batch) max=$2;; esac; shift; done
case $sys in
  hf) if [ -n "$HF_OOM_AT" ] && [ "$max" -ge "$HF_OOM_AT" ]; then
        echo "{\"system\": \"transformers\", \"error\": \"out of memory: OutOfMemoryError\", \"batch\": $max}"; exit 1
      fi
      echo "# transformers: built"; echo "{\"system\": \"transformers\", \"version\": \"5.17.0\", \"weights\": \"random init\", \"batch\": $max, \"batch_rule\": \"fit, at most $max\", \"prefill_s\": 1.0, \"decode_s\": 1.0, \"total_throughput\": 35.0}";;
  flexgen) MODE;;
esac
'''
HANG = 'echo "init weight..."; sleep 297'
ERROR = ('echo "{\\"system\\": \\"flexgen\\", \\"error\\": \\"out of memory: CUDA out of memory '
         'at batch $max\\", \\"batch\\": $max}"; exit 1')


def drive(tmp, ours, flexgen_mode, seconds, peers="hf,flexgen", shapes="64+8,64+16",
          hf_oom_at=""):
    build = os.path.join(tmp, "build")
    os.makedirs(os.path.join(build, "bench"), exist_ok=True)
    script(os.path.join(build, "bench", "bench_throughput"), ours)
    script(os.path.join(tmp, "python"), PEER.replace("MODE", flexgen_mode))
    out = os.path.join(tmp, "out")
    t0 = time.time()
    p = subprocess.run([sys.executable, os.path.join(PEERS, "gpu_bench.py"), "--build", build,
                        "--out", out, "--device", "cpu", "--models", "opt-125m", "--shapes",
                        shapes, "--max-num-seqs", "9", "--peers", peers, "--seconds",
                        str(seconds), "--peer-python", os.path.join(tmp, "python")],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, HF_OOM_AT=hf_oom_at))
    rows = [json.loads(l) for l in open(os.path.join(out, "bench.jsonl"))]
    table = open(os.path.join(out, "bench-table.txt")).read()
    return p, time.time() - t0, rows, table


with tempfile.TemporaryDirectory() as tmp:
    # Ours, transformers, then a FlexGen that hangs: stopped at the deadline's limit,
    # everything after it skipped, the table still written.
    p, wall, rows, table = drive(tmp, OURS_OK, HANG, 14)
    out = p.stdout + p.stderr
    head, rows = rows[0], rows[1:]
    tap(head["bench"] == "gpu" and head["max_num_seqs"] == 9, "bench.jsonl starts with its "
        "header", out)
    order = [(r["system"], r.get("policy"), r["gen_len"], r["status"]) for r in rows]
    want = [("ours", "full", 8, "ok"), ("ours", "h2o", 8, "ok"), ("hf", None, 8, "ok"),
            ("flexgen", None, 8, "failed"), ("ours", "full", 16, "skipped"),
            ("ours", "h2o", 16, "skipped"), ("hf", None, 16, "skipped"),
            ("flexgen", None, 16, "skipped")]
    tap(order == want, "the order: ours (full, h2o), the peers, then the next shape; "
        "skipped at the deadline", f"{order}\n{out}")
    tap(rows[2]["batch"] == 7, "the peer's batch is bounded by our full batch (7)", rows[2])
    tap("stopped at its time limit" in rows[3]["reason"] and rows[3]["wall_s"] < 12,
        "a hung peer is stopped at its time limit", rows[3])
    tap(p.returncode == 0 and wall < 30, f"exit 0 (ours ran the first shape), in {wall:.0f} s "
        "for a 14 s deadline", out)
    tap("| opt-125m | 64 + 8 | transformers 5.17.0 | random init | 7 (our full's) | 1.00 | "
        "1.00 | 35.0 | 2.57x | 2.00x |" in table, "the table: tokens/s and h2o / this, "
        "full / this", table)
    tap("| h2oserve h2o 20% |" in table and "9 (cap; 40 fit)" in table and
        "7 (all that fit)" in table, "our batches: the cap and the fit", table)
    tap(table.count("SKIPPED: deadline") == 4 and "FAILED: stopped at its time limit" in
        table, "skipped and failed runs are rows with their reason", table)
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/cmdline", "rb").read() == b"sleep\x00297\x00":
                left.append(pid)
        except OSError:
            pass
    tap(not left, "the hung peer's process group is gone (its sleep too)", left)

with tempfile.TemporaryDirectory() as tmp:
    # Ours fails: its reason in both rows, the peers bounded by the cap, exit 1. A peer
    # out of memory is tried once more at 70% of its batch: transformers then runs,
    # FlexGen fails again and its row says both.
    p, wall, rows, table = drive(tmp, OURS_FAIL, ERROR, 60, shapes="64+8", hf_oom_at="8")
    rows = rows[1:]
    out = p.stdout + p.stderr
    tap([r["status"] for r in rows] == ["failed", "failed", "ok", "failed"],
        "ours failed, transformers ran, FlexGen failed", out)
    tap(all("no GPU found" in r["reason"] for r in rows[:2]),
        "our failure's reason is bench_throughput's message", rows[:2])
    tap(rows[2]["batch"] == 6 and "after an out-of-memory at batch 9" in rows[2]["batch_note"],
        "without our batch the peers are bounded by the cap (9); out of memory at 9, "
        "transformers ran at 6", rows[2])
    tap(rows[3]["reason"].startswith("out of memory") and
        rows[3]["reason"].endswith("after an out-of-memory at batch 9") and
        "at batch 6" in rows[3]["reason"],
        "the peer's own error is the reason, with the retry's", rows[3])
    tap(p.returncode == 1, "exit 1: ours produced nothing", out)

# Ours: full runs, h2o runs out of GPU memory; the retry runs h2o alone at 0.8.
OURS_OOM = r'''
util=0.9; pols=
while [ $# -gt 0 ]; do case $1 in --gpu-memory-utilization) util=$2;; --kv-policy) pols=$2;; esac; shift; done
for pol in ${pols//,/ }; do
  if [ $pol = h2o ] && [ $util = 0.9 ]; then
    echo "bench_throughput: CUDA backend: KV pool (K): out of memory" >&2; exit 1
  fi
  echo "{\"bench\": \"throughput\", \"dtype\": \"fp16\", \"kv_policy\": \"$pol\", \"batch\": 5, \"batch_fit\": 5, \"prefill_latency_s\": 1.0, \"decode_latency_s\": 1.0, \"total_throughput\": 50, \"util\": $util}"
done
'''
with tempfile.TemporaryDirectory() as tmp:
    p, wall, rows, table = drive(tmp, OURS_OOM, ERROR, 60, shapes="64+8", peers="")
    rows = rows[1:]
    out = p.stdout + p.stderr
    tap([(r["policy"], r["status"], r.get("raw", {}).get("util")) for r in rows] ==
        [("full", "ok", 0.9), ("h2o", "ok", 0.8)] and
        "--gpu-memory-utilization 0.8" in rows[1]["batch_note"] and
        "0.8" not in rows[0]["batch_note"] and p.returncode == 0,
        "ours out of memory in h2o: full kept, h2o once more alone at 0.8", out)

# gpu_peers.py's FlexGen helpers.
sample = os.path.join(PEERS, "testdata", "flexgen-0.1.7.log")
r = gpu_peers.parse_flexgen_log(open(sample).read())
tap(r["prefill_s"] == 5.205 and r["decode_s"] == 0.981 and r["total_throughput"] == 10.346
    and r["peak_gpu_mem_bytes"] == 0, "FlexGen's log: the last of two appended entries", r)
try:
    gpu_peers.parse_flexgen_log("model size: 1 GB\n")
    tap(False, "a log without latencies is an error")
except ValueError as e:
    tap("prefill" in str(e), "a log without latencies is an error", e)
argv = gpu_peers.flexgen_argv("opt-6.7b", 300, 512, 32, "/w")
# flex_opt.py's own option names (FlexGen 0.1.7, add_parser_arguments).
flex_opts = {"--model", "--path", "--offload-dir", "--prompt-len", "--gen-len",
             "--cut-gen-len", "--debug-mode", "--gpu-batch-size", "--num-gpu-batches",
             "--percent", "--sep-layer", "--pin-weight", "--cpu-cache-compute",
             "--attn-sparsity", "--compress-weight", "--compress-cache", "--log-file",
             "--no-log", "--verbose", "--overlap"}
tap({x for x in argv if x.startswith("--")} <= flex_opts and "_DUMMY_" in argv and
    argv[argv.index("--percent") + 1:argv.index("--percent") + 7] ==
    ["100", "0", "100", "0", "100", "0"] and argv[argv.index("--gpu-batch-size") + 1] == "300",
    "FlexGen's command line: its own options, dummy weights, everything on the GPU", argv)
w, per = gpu_peers.flexgen_bytes("opt-6.7b", 512, 32)
# FlexGen's model_bytes for OPT-6.7B (2 bytes a parameter, its count) and its
# cache_bytes for one sequence of 544 tokens: 2 * 544 * 32 * 4096 * 2.
tap(abs(w - 13.28e9) < 0.05e9 and per > 2 * 544 * 32 * 4096 * 2,
    f"FlexGen's memory: weights {w / 1e9:.2f} GB, {per / 2**20:.0f} MiB a sequence", (w, per))
n = gpu_peers.fit_batch(150e9, w, per, 10000)
tap(0.92 * 150e9 >= w + n * per and 0.92 * 150e9 < w + (n + 1) * per and
    gpu_peers.fit_batch(150e9, w, per, 100) == 100 and gpu_peers.fit_batch(1e9, w, per, 10) == 0,
    f"the fit: {n} sequences in 150 GB, the cap, none when the weights do not fit")

print(f"1..{len(results)}")
sys.exit(0 if all(results) else 1)
