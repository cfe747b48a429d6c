#!/usr/bin/env python3
"""test_loadgen.py - bench/loadgen against a running server on dummy:tiny.

Issue 7: loadgen completes 1000 requests at concurrency 64 with zero failures and
prints the vLLM-style block (every label of `vllm bench serve`), and its saved JSON
agrees with the block (1000 records, counts, every request generated exactly O
tokens, keep-alive connections: never more than the concurrency). Failures are
counted and end the run with a clear message and a non-zero exit, never a hang: a
port with nothing listening, an unknown model (HTTP 404 on every request), and a
server that accepts connections but never answers (--timeout).

vLLM's own flags, with vLLM's meaning: --percentile-metrics and --metric-percentiles
choose the block's sections and P<p> lines exactly; --endpoint is the path the
requests go to (a wrong one fails them with the server's 404, one that is no
completions path is refused); --dataset-name, --backend and --burstiness refuse
what we lack or what is invalid, with a message and exit 2; a bursty run at a
finite rate completes; the saved JSON has vLLM's per-request arrays (ttfts, itls,
input_lens, output_lens, ...) agreeing with its summary keys, and vLLM's
--save-result --result-dir/--result-filename form and default file name work.
No timing assertions: the machine is shared. TAP output.
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
from test_server import MODEL, Server, metric, tap, results  # noqa: E402

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
    test_vllm_arrays(d, out)
    used = metric(srv, "kv_cache_blocks_used")
    running = metric(srv, "num_requests_running")
    tap(used == 0 and running == 0, "the server is idle afterwards", (used, running))


def np_percentile(xs, p):
    """numpy.percentile(xs, p), linear interpolation."""
    xs = sorted(xs)
    if not xs:
        return 0.0
    pos = p / 100 * (len(xs) - 1)
    lo = int(pos)
    if lo >= len(xs) - 1:
        return xs[-1]
    return xs[lo] + (xs[lo + 1] - xs[lo]) * (pos - lo)


def close(a, b, rel=1e-9, abs_=1e-9):
    return abs(a - b) <= max(abs_, rel * abs(b))


def test_vllm_arrays(d, out):
    """The saved file of test_load: vLLM's keys and arrays, agreeing with the summary."""
    arrays = ("ttfts", "itls", "input_lens", "output_lens", "latencies", "start_times",
              "generated_texts", "errors")
    missing = [k for k in arrays if not isinstance(d.get(k), list) or len(d[k]) != N]
    tap(not missing, f"the saved JSON has vLLM's per-request arrays, {N} long each",
        missing)
    if missing:
        return
    keys = ["date", "backend", "endpoint_type", "label", "model_id", "num_prompts",
            "request_rate", "burstiness", "max_concurrency", "completed", "failed",
            "total_input_tokens", "total_output_tokens", "request_throughput",
            "output_throughput", "total_token_throughput"]
    for m in ("ttft", "tpot", "itl", "e2el"):
        keys += [f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms", f"p99_{m}_ms"]
    absent = [k for k in keys if k not in d]
    tap(not absent and d["backend"] == "openai" and d["num_prompts"] == N
        and d["request_rate"] == "inf" and d["burstiness"] == 1
        and d["max_concurrency"] == CONC and d["model_id"] == d["config"]["model"],
        "the saved JSON has vLLM's setup and summary keys", absent)
    tap(all(n == OUT_LEN for n in d["output_lens"])
        and all(n == IN_LEN for n in d["input_lens"])
        and sum(d["output_lens"]) == d["total_output_tokens"]
        and sum(d["input_lens"]) == d["total_input_tokens"],
        "output_lens are all the requested O, input_lens all I; their sums are the totals",
        (set(d["output_lens"]), set(d["input_lens"])))
    ttfts, lats, itls = d["ttfts"], d["latencies"], d["itls"]
    tap(close(sum(ttfts) / N * 1000, d["mean_ttft_ms"])
        and close(sum(lats) / N * 1000, d["mean_e2el_ms"])
        and close(np_percentile(ttfts, 99) * 1000, d["p99_ttft_ms"])
        and close(np_percentile(ttfts, 50) * 1000, d["median_ttft_ms"]),
        "ttfts and latencies (s) give the summary's mean, median and P99 (ms)",
        (sum(ttfts) / N * 1000, d["mean_ttft_ms"]))
    mean = sum(ttfts) / N
    std = (sum((x - mean) ** 2 for x in ttfts) / N) ** 0.5
    tap(close(std * 1000, d["std_ttft_ms"], rel=1e-6), "std_ttft_ms is numpy's std",
        (std * 1000, d["std_ttft_ms"]))
    pooled = [x for row in itls for x in row]
    tap(pooled and close(sum(pooled) / len(pooled) * 1000, d["mean_itl_ms"])
        and close(np_percentile(pooled, 99) * 1000, d["p99_itl_ms"]),
        "itls pooled give mean_itl_ms and p99_itl_ms", len(pooled))
    # One chunk per token would give O - 1 gaps; the server sends no chunk for a
    # token whose text is still empty (a UTF-8 sequence held back), so a request
    # may have fewer. Never more, and the gaps always add up to the latency.
    tap(all(len(row) <= n - 1 for row, n in zip(itls, d["output_lens"]))
        and sum(len(row) == n - 1 for row, n in zip(itls, d["output_lens"])) > N // 2
        and all(abs(t + sum(row) - lat) < 1e-6 for t, row, lat in zip(ttfts, itls, lats)),
        "len(itls[i]) <= output_lens[i] - 1 (equal for most); ttft + sum(itls) = latency",
        {len(row) for row in itls})
    recs = d["requests"]
    tap(all(close(r["ttft_ms"], t * 1000) and close(r["e2el_ms"], lat * 1000)
            and r["start_s"] == st for r, t, lat, st in zip(recs, ttfts, lats,
                                                            d["start_times"])),
        "the arrays are in request order: they agree with the records")
    # A completion of dummy:tiny's random bytes can be empty text (invalid UTF-8 held
    # back to the end, then dropped), so "non-empty" holds for most, not all.
    texts = d["generated_texts"]
    tap(all(e == "" for e in d["errors"]) and len(texts) == len(d["errors"])
        and all(isinstance(t, str) for t in texts)
        and sum(1 for t in texts if t) >= 0.9 * len(texts),
        "errors are all empty; generated_texts are strings, nearly all non-empty",
        [t for t in texts if not t][:3])
    tap("E2EL" not in out and "End-to-end Latency" not in out,
        "vLLM's default --percentile-metrics (ttft,tpot,itl): no E2EL section", out)


def block_labels(out):
    """The labels of the block's lines from the first section rule on."""
    lines = out.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("---")), len(lines))
    return [l.split("  ")[0].rstrip() if not l.startswith(("-", "=")) else l
            for l in lines[start:]]


def test_percentiles(srv, tmp):
    save = os.path.join(tmp, "pct.json")
    rc, out, err = loadgen("--port", str(srv.port), "--num-prompts", "40",
                           "--random-input-len", "8", "--random-output-len", "4",
                           "--percentile-metrics", "e2el,ttft",
                           "--metric-percentiles", "50,90,99", "--save-result", save)
    want = ["---------------Time to First Token----------------",
            "Mean TTFT (ms):", "Median TTFT (ms):", "P50 TTFT (ms):", "P90 TTFT (ms):",
            "P99 TTFT (ms):",
            "----------------End-to-end Latency----------------",
            "Mean E2EL (ms):", "Median E2EL (ms):", "P50 E2EL (ms):", "P90 E2EL (ms):",
            "P99 E2EL (ms):",
            "=================================================="]
    got = block_labels(out)
    tap(rc == 0 and got == want,
        "--percentile-metrics e2el,ttft --metric-percentiles 50,90,99: exactly those "
        "sections (in vLLM's order) and P lines", f"rc {rc}\n{err}\n{got}")
    tap(value(out, "P50 TTFT (ms):") == value(out, "Median TTFT (ms):")
        and value(out, "P50 E2EL (ms):") == value(out, "Median E2EL (ms):")
        and value(out, "P90 E2EL (ms):") <= value(out, "P99 E2EL (ms):"),
        "P50 is the median; P90 <= P99", out)
    try:
        with open(save) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        tap(False, "the percentile run's JSON parses", e)
        return
    tap(all(f"p{p}_{m}_ms" in d for p in (50, 90, 99) for m in ("ttft", "e2el"))
        and d["p50_ttft_ms"] == d["median_ttft_ms"]
        and close(d["p90_e2el_ms"], np_percentile(d["latencies"], 90) * 1000),
        "the JSON has p50/p90/p99 keys; p90_e2el_ms is the 90th percentile of latencies",
        sorted(k for k in d if k.startswith("p")))
    rc, out, err = loadgen("--port", str(srv.port), "--num-prompts", "10",
                           "--random-input-len", "8", "--random-output-len", "4",
                           "--percentile-metrics", "tpot",
                           "--metric-percentiles", "99.9,25")
    tap(rc == 0 and block_labels(out) == [
            "-----Time per Output Token (excl. 1st token)------", "Mean TPOT (ms):",
            "Median TPOT (ms):", "P99.9 TPOT (ms):", "P25 TPOT (ms):",
            "=================================================="],
        "--metric-percentiles 99.9,25: P99.9 then P25, as given", f"rc {rc}\n{out}")


def test_endpoint(srv):
    rc, out, err = loadgen("--port", str(srv.port), "--num-prompts", "5",
                           "--random-input-len", "4", "--random-output-len", "2",
                           "--endpoint", "/v1/nothing/completions")
    tap(rc == 1 and value(out, "Failed requests:") == 5
        and "HTTP 404" in err and "/v1/nothing/completions" in err,
        "--endpoint to a path the server lacks: every request fails with its 404, exit 1",
        f"rc {rc}\n{err}\n{out}")
    rc, out, err = loadgen("--base-url", f"http://127.0.0.1:{srv.port}", "--num-prompts",
                           "5", "--random-input-len", "4", "--random-output-len", "2",
                           "--endpoint", "/v1/completions", "--backend", "vllm",
                           "--dataset-name", "random")
    tap(rc == 0 and value(out, "Successful requests:") == 5,
        "--base-url + --endpoint /v1/completions --backend vllm --dataset-name random",
        f"rc {rc}\n{err}\n{out}")


def test_burstiness(srv, tmp):
    save = os.path.join(tmp, "burst.json")
    n = 100
    rc, out, err = loadgen("--port", str(srv.port), "--num-prompts", str(n),
                           "--random-input-len", "8", "--random-output-len", "4",
                           "--request-rate", "50", "--burstiness", "0.5",
                           "--save-result", save)
    tap(rc == 0 and value(out, "Successful requests:") == n
        and value(out, "Failed requests:") == 0,
        "--request-rate 50 --burstiness 0.5: all 100 requests complete",
        f"rc {rc}\n{err}\n{out}")
    try:
        with open(save) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        tap(False, "the bursty run's JSON parses", e)
        return
    # The schedule ends at exactly n / rate = 2 s (vLLM stretches it there), and a
    # request is never sent before its release: a bound no slow machine can break.
    tap(d["burstiness"] == 0.5 and d["request_rate"] == 50
        and max(d["start_times"]) >= n / 50 - 1e-6,
        "the run is recorded as rate 50, burstiness 0.5; the last request goes out at "
        "or after n / rate", (d["burstiness"], d["request_rate"], max(d["start_times"])))


def test_vllm_save_form(srv, tmp):
    res = os.path.join(tmp, "res", "sub")
    rc, out, err = loadgen("--port", str(srv.port), "--num-prompts", "3",
                           "--random-input-len", "4", "--random-output-len", "2",
                           "--save-result", "--result-dir", res,
                           "--result-filename", "named.json")
    path = os.path.join(res, "named.json")
    ok = rc == 0 and os.path.exists(path)
    tap(ok and json.load(open(path))["completed"] == 3,
        "vLLM's --save-result --result-dir D --result-filename F writes D/F (D created)",
        f"rc {rc}\n{err}")
    auto = os.path.join(tmp, "auto")
    rc, out, err = loadgen("--port", str(srv.port), "--num-prompts", "3",
                           "--random-input-len", "4", "--random-output-len", "2",
                           "--backend", "vllm", "--request-rate", "200",
                           "--max-concurrency", "2", "--save-result", "--result-dir", auto)
    names = os.listdir(auto) if os.path.isdir(auto) else []
    pat = r"vllm-200\.0qps-concurrency2-" + re.escape(MODEL.split("/")[-1]) \
        + r"-\d{8}-\d{6}\.json"
    tap(rc == 0 and len(names) == 1 and re.fullmatch(pat, names[0]),
        "--save-result alone: vLLM's name {backend}-{rate}qps-concurrency{C}-{model}-"
        "{date}.json", f"rc {rc} {names}\n{err}")
    rc, out, err = loadgen("--port", str(srv.port), "--num-prompts", "3",
                           "--random-input-len", "4", "--random-output-len", "2",
                           "--save-result", os.path.join(tmp, "a.json"),
                           "--result-filename", os.path.join(tmp, "b.json"))
    tap(rc == 2 and "two result files" in err and "Serving Benchmark Result" not in out,
        "--save-result FILE and a different --result-filename: refused, exit 2",
        f"rc {rc}\n{err}")


def test_refusals():
    # A free port: a flag that slipped through would reach "cannot connect" (exit 1)
    # instead of the parser's exit 2.
    port = str(free_port())
    cases = [
        (["--dataset-name", "sharegpt"], ["sharegpt", "random"]),
        (["--dataset-name", "sonnet"], ["sonnet", "random"]),
        (["--backend", "openai-chat"], ["chat/completions", "--backend openai"]),
        (["--backend", "tgi"], ["tgi", "openai or vllm"]),
        (["--burstiness", "0"], ["--burstiness", "> 0"]),
        (["--burstiness", "-0.5"], ["--burstiness", "> 0"]),
        (["--burstiness", "fast"], ["--burstiness"]),
        (["--endpoint", "/v1/models"], ["--endpoint", "completions"]),
        (["--percentile-metrics", "ttft,p99"], ["'p99'", "ttft, tpot, itl, e2el"]),
        (["--metric-percentiles", "50,101"], ["--metric-percentiles", "[0, 100]"]),
        (["--goodput", "ttft:100"], ["unrecognized option '--goodput'"]),
    ]
    for args, words in cases:
        rc, out, err = loadgen("--port", port, "--num-prompts", "2", *args, limit=30)
        tap(rc == 2 and all(w in err for w in words) and "Traceback" not in err
            and "Serving Benchmark Result" not in out,
            f"{' '.join(args)}: refused with a message naming it, exit 2",
            f"rc {rc}\n{err}")


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
            test_percentiles(srv, tmp)
            test_endpoint(srv)
            test_burstiness(srv, tmp)
            test_vllm_save_form(srv, tmp)
            test_unknown_model(srv)
        finally:
            tap(srv.stop() == 0, "server exits 0")
    test_nothing_listening()
    test_silent_server()
    test_refusals()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
