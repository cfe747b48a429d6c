#!/usr/bin/env python3
"""test_loadgen.py - bench/loadgen against a running server on dummy:tiny.

Issue 7: loadgen completes 1000 requests at concurrency 64 with zero failures and
prints the vLLM-style block (every label of `vllm bench serve`), and its saved JSON
agrees with the block (1000 records, counts, every request generated exactly O
tokens, keep-alive connections: never more than the concurrency). Failures are
counted and end the run with a clear message and a non-zero exit, never a hang: a
port with nothing listening, an unknown model (HTTP 404 on every request), and a
server that accepts connections but never answers (--timeout). No timing
assertions: the machine is shared. TAP output.
Usage: test_loadgen.py H2OSERVE_BINARY LOADGEN_BINARY
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, metric, tap, results  # noqa: E402

LOADGEN = sys.argv[2]
N, CONC, IN_LEN, OUT_LEN = 1000, 64, 16, 8

# vLLM's block, in order (REFERENCE.md section 3), with vLLM's default
# --percentile-metrics ttft,tpot,itl: no E2EL section unless asked for.
LABELS = [
    "============ Serving Benchmark Result ============",
    "Successful requests:", "Failed requests:", "Benchmark duration (s):",
    "Total input tokens:", "Total generated tokens:", "Request throughput (req/s):",
    "Output token throughput (tok/s):", "Total Token throughput (tok/s):",
    "---------------Time to First Token----------------",
    "Mean TTFT (ms):", "Median TTFT (ms):", "P99 TTFT (ms):",
    "-----Time per Output Token (excl. 1st token)------",
    "Mean TPOT (ms):", "Median TPOT (ms):", "P99 TPOT (ms):",
    "---------------Inter-token Latency----------------",
    "Mean ITL (ms):", "Median ITL (ms):", "P99 ITL (ms):",
    "==================================================",
]


def loadgen(*args, limit=240):
    """Run loadgen; returns (rc, stdout, stderr). A hang is a test failure (rc None)."""
    try:
        p = subprocess.run([LOADGEN, *args], capture_output=True, text=True, timeout=limit)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return None, e.stdout or "", e.stderr or ""


def value(out, label):
    m = re.search(r"^" + re.escape(label) + r"\s+(\S+)", out, re.M)
    return float(m.group(1)) if m else None


def labels_in_order(out):
    pos = 0
    for label in LABELS:
        pos = out.find(label, pos)
        if pos < 0:
            return label
        pos += len(label)
    return None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_load(srv, tmp):
    save = os.path.join(tmp, "result.json")
    rc, out, err = loadgen("--host", "127.0.0.1", "--port", str(srv.port),
                           "--num-prompts", str(N), "--max-concurrency", str(CONC),
                           "--random-input-len", str(IN_LEN),
                           "--random-output-len", str(OUT_LEN), "--seed", "7",
                           "--save-result", save)
    tap(rc == 0, f"{N} requests at concurrency {CONC}: exit 0", f"rc {rc}\n{err}\n{out}")
    missing = labels_in_order(out)
    tap(missing is None, "the vLLM block is printed with every label, in order",
        f"missing {missing!r}\n{out}")
    tap(value(out, "Successful requests:") == N and value(out, "Failed requests:") == 0,
        "the block counts every request successful, none failed", out)
    tap(value(out, "Total generated tokens:") == N * OUT_LEN
        and value(out, "Total input tokens:") == N * IN_LEN,
        "the block's token totals are N x O generated and N x I input", out)
    try:
        with open(save) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        tap(False, "the saved JSON parses", e)
        return
    recs = d["requests"]
    tap(len(recs) == N and d["completed"] == N and d["failed"] == 0
        and all(r["success"] for r in recs) and [r["index"] for r in recs] == list(range(N)),
        "the saved JSON has 1000 successful records", (len(recs), d["completed"], d["failed"]))
    outs = [r["output_tokens"] for r in recs]
    tap(all(o == OUT_LEN for o in outs) and d["total_output_tokens"] == N * OUT_LEN
        and sum(r["prompt_tokens"] for r in recs) == d["total_input_tokens"] == N * IN_LEN,
        "every request generated exactly O tokens; totals agree with the records",
        (set(outs), d["total_output_tokens"], d["total_input_tokens"]))
    ok = all(0 <= r["ttft_ms"] <= r["e2el_ms"] and len(r["itl_ms"]) <= OUT_LEN - 1
             and abs(r["ttft_ms"] + sum(r["itl_ms"]) - r["e2el_ms"]) < 1e-3 for r in recs)
    tap(ok, "each record: TTFT <= E2EL, at most O - 1 gaps, TTFT + sum(ITL) = E2EL")
    mean_ttft = sum(r["ttft_ms"] for r in recs) / N
    tpots = [(r["e2el_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1) for r in recs]
    itls = sorted(x for r in recs for x in r["itl_ms"])
    close = (lambda a, b: abs(a - b) <= 1e-6 * max(1.0, abs(b)))
    tap(close(d["mean_ttft_ms"], mean_ttft) and close(d["mean_tpot_ms"], sum(tpots) / N)
        and close(d["mean_itl_ms"], sum(itls) / len(itls))
        and close(d["duration"] * d["request_throughput"], N)
        and close(d["duration"] * d["output_throughput"], N * OUT_LEN),
        "the summary is the vLLM metrics of the records (mean TTFT, TPOT, pooled ITL, "
        "throughputs)", {k: d[k] for k in ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms")})
    tap(1 <= d["config"]["connections_opened"] <= CONC,
        "keep-alive: the pool opened at most max-concurrency connections",
        d["config"]["connections_opened"])
    used = metric(srv, "kv_cache_blocks_used")
    running = metric(srv, "num_requests_running")
    tap(used == 0 and running == 0, "the server is idle afterwards", (used, running))


def test_unknown_model(srv):
    rc, out, err = loadgen("--port", str(srv.port), "--model", "no-such-model",
                           "--num-prompts", "5", "--random-input-len", "4",
                           "--random-output-len", "2")
    tap(rc == 1 and value(out, "Failed requests:") == 5
        and value(out, "Successful requests:") == 0 and "HTTP 404" in err,
        "an unknown model: 5 failed requests counted, HTTP 404 named, exit 1",
        f"rc {rc}\n{err}\n{out}")


def test_nothing_listening():
    port = free_port()
    rc, out, err = loadgen("--port", str(port), "--num-prompts", "10", limit=30)
    tap(rc is not None and rc != 0 and "cannot connect" in err
        and "connection refused" in err and "Serving Benchmark Result" not in out,
        "nothing listening: a clear error and a non-zero exit, no block",
        f"rc {rc}\n{err}\n{out}")


def test_silent_server():
    # Accepts connections (the kernel's backlog does) and never answers.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        rc, out, err = loadgen("--port", str(s.getsockname()[1]), "--model", "m",
                               "--num-prompts", "3", "--timeout", "0.5", limit=60)
    finally:
        s.close()
    tap(rc is not None and rc != 0 and "timed out after 500 ms" in err,
        "a server that never answers: --timeout ends the run with an error",
        f"rc {rc}\n{err}\n{out}")


def main():
    with tempfile.TemporaryDirectory(prefix="loadgen-test-") as tmp:
        srv = Server("--max-num-seqs", "64", "--max-batched-tokens", "1024")
        try:
            test_load(srv, tmp)
            test_unknown_model(srv)
        finally:
            tap(srv.stop() == 0, "server exits 0")
    test_nothing_listening()
    test_silent_server()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
