#!/usr/bin/env python3
"""test_bench_throughput.py - bench_throughput's batch choice and policy list.

tests/gpu/bench.sh runs FlexGen's workload at "the largest batch that fits the GPU"
without trial runs: bench_throughput --batch max sizes each policy's batch from the
backend's KV capacity (be_ops.kv_capacity; on the CPU, which has none, the server's
default pool, min(4 GiB, a quarter of RAM)), capped by --max-num-seqs, and sizes
the pool for that batch only; --kv-policy full,h2o runs both policies on one load
of the model, each with its own batch, each JSON line printed right after its row.
This checks, on the CPU backend and dummy:tiny:
- --batch max: the capacity is the CPU default, the batch the cap, the batch that
  fits past it (larger for h2o), and the pool what --batch N needs for the same N
  (not the 4 GiB of the capacity: a --kv-cache-bytes of the capacity would touch
  all of it, so the two are compared on a small cache instead);
- --kv-cache-bytes with a small cache: the batch is the one that fits, --max-num-seqs
  below it caps it and the batch that fit is still reported;
- the list: one model load, full then h2o, rows and JSON lines interleaved;
- refusals: --batch max with --kv-cache-bytes, --max-num-seqs 0, a policy twice, an
  unknown policy, a batch that is neither a number nor max.
TAP output. Usage: test_bench_throughput.py BENCH_THROUGHPUT_BINARY
"""
import json
import os
import subprocess
import sys

BENCH = sys.argv[1]
results = []


def tap(ok, name, detail=""):
    results.append(ok)
    print(("ok" if ok else "not ok") + f" {len(results)} - {name}")
    if not ok and detail:
        for line in str(detail).splitlines()[:30]:
            print("# " + line)
    sys.stdout.flush()


def run(*args):
    """bench_throughput on dummy:tiny, 40 + 8 tokens: (rc, stdout lines, JSON lines)."""
    p = subprocess.run([BENCH, "--model", "dummy:tiny", "--prompt-len", "40", "--gen-len",
                        "8", *args], capture_output=True, text=True, timeout=120)
    lines = p.stdout.splitlines()
    js = [json.loads(l) for l in lines if l.startswith('{"bench"')]
    return p.returncode, lines, js, p.stdout + p.stderr


def cpu_capacity():
    """The server's default pool on the CPU (engine.c): min(4 GiB, RAM / 4)."""
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min(4 << 30, ram // 4)


# --batch max, capped: both policies at the cap, sized from the CPU's default pool.
rc, lines, js, out = run("--batch", "max", "--max-num-seqs", "5", "--kv-policy", "full,h2o")
tap(rc == 0 and [j["kv_policy"] for j in js] == ["full", "h2o"],
    "--batch max --kv-policy full,h2o: one JSON line per policy, in order", out)
tap(all(j["batch"] == 5 and j["batch_rule"] == "max" and j["max_num_seqs"] == 5
        for j in js), "--max-num-seqs 5 caps both batches", out)
tap(all(j["kv_capacity_bytes"] == cpu_capacity() for j in js),
    f"the CPU's capacity is the server's default pool ({cpu_capacity()} bytes)", out)
tap(all(j["batch_fit"] > 5 for j in js) and js[1]["batch_fit"] > js[0]["batch_fit"],
    "the batch that fits is past the cap, and H2O's is larger than full's", out)
tap(all(j["kv_pool_bytes"] == j["peak_kv_bytes"] < j["kv_capacity_bytes"] for j in js),
    "the pool is sized for the batch, not the capacity, and the run fills it", out)
tap(all(isinstance(j["load_s"], float) for j in js), "the model's load time is reported", out)
rows = [i for i, l in enumerate(lines) if l.split()[:1] in (["full"], ["h2o"])
        and "decode step" not in l]
jl = [i for i, l in enumerate(lines) if l.startswith('{"bench"')]
tap(len(rows) == 2 and len(jl) == 2 and jl[0] == rows[0] + 1 and jl[1] == rows[1] + 1,
    "each JSON line follows its row (a policy cut short leaves the ones before it)", out)
tap(sum("loaded in" in l for l in lines) == 1, "one model load for the list", out)
max_runs = {j["kv_policy"]: j for j in js}

# A fixed batch of 5: the pool --batch max gave each policy.
for pol in ("full", "h2o"):
    rc, _, js3, out = run("--batch", "5", "--kv-policy", pol)
    tap(rc == 0 and js3 and js3[0]["batch_rule"] == "fixed" and
        js3[0]["kv_pool_bytes"] == max_runs[pol]["kv_pool_bytes"],
        f"{pol}: --batch max's pool is what --batch 5 needs", out)

# A small KV cache: the fit binds, and a lower --max-num-seqs caps it; --batch max
# takes the same path with the backend's capacity as the cache.
rc, _, js4, out = run("--kv-cache-bytes", "1M", "--kv-policy", "full")
fit = js4[0]["batch_fit"] if js4 else 0
tap(rc == 0 and js4 and 1 < fit < 4096 and js4[0]["batch"] == fit and
    js4[0]["peak_kv_bytes"] <= 1 << 20,
    "--kv-cache-bytes 1M: the batch is the largest that fits", out)
rc, _, js5, out = run("--kv-cache-bytes", "1M", "--kv-policy", "full", "--max-num-seqs",
                      str(max(fit - 1, 1)))
tap(rc == 0 and js5 and js5[0]["batch"] == max(fit - 1, 1) and
    js5[0]["batch_fit"] == fit, "--max-num-seqs below the fit caps the batch and reports "
    "the fit", out)

# --kv-cache-dtype int8: the JSON line says so, and the same KV memory holds more
# sequences than the default cache (its blocks are smaller: scales included).
rc, _, js7, out = run("--kv-cache-bytes", "1M", "--kv-policy", "full", "--kv-cache-dtype",
                      "int8")
tap(rc == 0 and js7 and js7[0]["kv_cache_dtype"] == "int8" and js4 and
    js4[0]["kv_cache_dtype"] == js4[0]["dtype"] and js7[0]["batch_fit"] > fit and
    js7[0]["peak_kv_bytes"] <= 1 << 20,
    "--kv-cache-dtype int8: reported, and 1M holds a larger batch", out)

# Refusals: exit 2 with a message, nothing run.
for args, what in [(["--batch", "max", "--kv-cache-bytes", "1M"], "--batch max with "
                    "--kv-cache-bytes"),
                   (["--batch", "max", "--max-num-seqs", "0"], "--max-num-seqs 0"),
                   (["--kv-policy", "full,full"], "a policy twice"),
                   (["--kv-policy", "full,lru"], "an unknown policy"),
                   (["--batch", "most"], "--batch most"),
                   (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype fp8")]:
    rc, _, js6, out = run(*args)
    tap(rc == 2 and not js6 and out.strip(), f"refused: {what}", out)

print(f"1..{len(results)}")
sys.exit(0 if all(results) else 1)
