#!/usr/bin/env python3
"""test_first_contact.py - what a new user meets first, over real HTTP (issue 15).

- The KV budget floor: on the built-in model (serve without --model), a request
  whose prompt + max_tokens fits under the floor gives exactly the `full` greedy
  text and evicts nothing; usage.kv_cache says what ran; kv_min_budget per request
  and the config key change it; bad values are 400.
- OpenAI behaviour: echo + logprobs + max_tokens 0 scores the prompt (the same
  numbers as max_tokens 1 gives), system_fingerprint, /v1/models' created.
- /metrics series carry model_name (escaped); CORS preflights allow the headers
  the browser asks for.
- Operations: RFC 3339 log lines with a level, --log-requests (one line per request),
  a model that fails to load (a truncated safetensors file) makes serve exit
  non-zero, and after the grace period running requests still end properly (a last
  chunk with finish_reason and [DONE], or a whole body) and the server exits 0.
TAP output. Usage: test_first_contact.py H2OSERVE_BINARY
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import BIN, Server, read_until, sse_events, tap, results  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROMPT = "The Linux kernel"  # the README's request
FLOOR = 128                  # KV_MIN_BUDGET_DEFAULT
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[(info|warn|error)\] ")


def complete(srv, **fields):
    body = {"model": "default", "prompt": PROMPT, "max_tokens": 24, "temperature": 0}
    body.update(fields)
    st, data, _ = srv.post("/v1/completions", body)
    try:
        return st, json.loads(data)
    except ValueError:
        return st, data


def text(r):
    return r["choices"][0]["text"]


def kv_floor(srv):
    st, full = complete(srv, kv_cache="full")
    st2, dflt = complete(srv)
    tap(st == 200 and st2 == 200 and text(full) and text(dflt) == text(full),
        "under the floor the default policy gives exactly full's greedy text", (full, dflt))
    # 4 + 24 tokens: 20% is 3 + 3; the floor (min(128, 28) = 28) covers it whole.
    tap(st2 == 200 and dflt["usage"]["kv_cache"] == {
        "policy": "h2o", "heavy": 14, "recent": 14, "min_budget": FLOOR, "evicted_tokens": 0},
        "usage.kv_cache: the policy, the floored budget, nothing evicted", dflt)
    tap(st == 200 and full["usage"]["kv_cache"] == {"policy": "full", "evicted_tokens": 0},
        "usage.kv_cache of full", full)
    st, bare = complete(srv, kv_min_budget=0)
    kv = bare["usage"]["kv_cache"] if st == 200 else {}
    tap(st == 200 and kv.get("heavy") == 3 and kv.get("recent") == 3
        and kv.get("min_budget") == 0 and kv.get("evicted_tokens", 0) > 0
        and text(bare) != text(full),
        "kv_min_budget 0: the bare 20% budget evicts, and the text changes", bare)
    # A longer request under a raised floor: still full's text, token for token.
    st, full_long = complete(srv, max_tokens=300, ignore_eos=True, kv_cache="full")
    st2, floored = complete(srv, max_tokens=300, ignore_eos=True, kv_min_budget=400)
    tap(st == 200 and st2 == 200 and text(floored) == text(full_long)
        and floored["usage"]["kv_cache"]["evicted_tokens"] == 0
        and floored["usage"]["kv_cache"]["heavy"] + floored["usage"]["kv_cache"]["recent"] == 304,
        "kv_min_budget 400 over 4 + 300 tokens: no eviction, full's text", floored)
    # n = 2 over the bare budget: the sequences' evictions add up.
    st, two = complete(srv, kv_min_budget=0, n=2, temperature=1, seed=5)
    tap(st == 200 and two["usage"]["kv_cache"]["evicted_tokens"] == 2 * kv["evicted_tokens"],
        "n 2: evicted_tokens sums both sequences", (two, kv))
    # The streamed usage chunk carries it too.
    st, raw, _ = srv.post("/v1/completions", {"model": "default", "prompt": PROMPT,
                                              "max_tokens": 8, "stream": True,
                                              "stream_options": {"include_usage": True}})
    ev = sse_events(raw.decode())
    last = json.loads(ev[-2]) if len(ev) >= 2 else {}
    tap(st == 200 and ev[-1] == "[DONE]" and last.get("usage", {}).get("kv_cache", {}).get(
        "policy") == "h2o", "the stream's usage chunk has kv_cache", ev[-2:])
    for bad in (-1, "12", 1.5, True):
        st, r = complete(srv, kv_min_budget=bad)
        tap(st == 400 and r["error"]["param"] == "kv_min_budget",
            f"kv_min_budget {bad!r}: 400 naming the param", r)


def openai_fields(srv, t_started):
    st1, one = complete(srv, echo=True, logprobs=2, max_tokens=1)
    st0, zero = complete(srv, echo=True, logprobs=2, max_tokens=0)
    lp0 = zero["choices"][0]["logprobs"] if st0 == 200 else None
    lp1 = one["choices"][0]["logprobs"] if st1 == 200 else None
    n = zero["usage"]["prompt_tokens"] if st0 == 200 else 0
    tap(st0 == 200 and n == 4 and len(lp0["tokens"]) == n
        and lp0["token_logprobs"][0] is None
        and all(isinstance(v, float) for v in lp0["token_logprobs"][1:])
        and all(len(t) >= 1 for t in lp0["top_logprobs"][1:]),
        "echo + logprobs + max_tokens 0: every prompt token but the first is scored", zero)
    tap(st1 == 200 and lp0 and lp0["token_logprobs"] == lp1["token_logprobs"][:n]
        and lp0["tokens"] == lp1["tokens"][:n] and text(zero) == text(one)[:len(text(zero))]
        and zero["usage"]["completion_tokens"] == 0
        and zero["choices"][0]["finish_reason"] == "length"
        and zero["usage"]["kv_cache"]["evicted_tokens"] == 0,
        "... the same scores as max_tokens 1, no completion tokens, finish length, "
        "nothing evicted under the floor", (zero, one))
    st, raw, _ = srv.post("/v1/completions", {"model": "default", "prompt": PROMPT,
                                              "max_tokens": 0, "echo": True, "logprobs": 1,
                                              "stream": True})
    chunks = [json.loads(e) for e in sse_events(raw.decode())[:-1]]
    scored = [v for c in chunks for v in (c["choices"][0]["logprobs"] or {}).get(
        "token_logprobs", [])]
    tap(st == 200 and len(scored) == n and scored[1:] == lp0["token_logprobs"][1:],
        "... and streamed", chunks)

    st, a = complete(srv)
    st2, b = complete(srv, max_tokens=3)
    fp = a.get("system_fingerprint") if st == 200 else None
    chunk_fps = {c.get("system_fingerprint") for c in chunks}
    tap(isinstance(fp, str) and re.fullmatch(r"fp_[0-9a-f]{10}", fp)
        and b.get("system_fingerprint") == fp and chunk_fps == {fp},
        "system_fingerprint: fp_ and 10 hex digits, the same on every response and chunk",
        (fp, b.get("system_fingerprint"), chunk_fps))
    st, raw, _ = srv.get("/v1/models")
    created = json.loads(raw)["data"][0]["created"] if st == 200 else 0
    st, raw, _ = srv.get("/v1/models/default")
    one_created = json.loads(raw)["created"] if st == 200 else -1
    tap(t_started - 2 <= created <= time.time() + 1 and one_created == created,
        "/v1/models created: the server's start time", (created, t_started))


def metrics_and_cors():
    name = 'my "od\\d" model'  # a quote and a backslash, escaped in the label
    srv = Server("--served-model-name", name, "--cors-allow-origin", "https://app.example")
    st, raw, _ = srv.get("/metrics")
    lines = [l for l in raw.decode().splitlines() if l and not l.startswith("#")]
    label = 'model_name="my \\"od\\\\d\\" model"'
    tap(st == 200 and len(lines) > 60 and all(label in l for l in lines),
        "every /metrics series carries model_name, escaped",
        [l for l in lines if label not in l][:5] or lines[:3])
    want = "x-stainless-os, x-stainless-lang, x-stainless-package-version, content-type, authorization"
    st, _, r = srv.request("OPTIONS", "/v1/completions", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": want})
    tap(st == 204 and r.getheader("Access-Control-Allow-Headers") == want
        and r.getheader("Access-Control-Allow-Origin") == "https://app.example"
        and "POST" in r.getheader("Access-Control-Allow-Methods", ""),
        "CORS preflight allows the headers the request asks for", r.getheaders())
    st, _, r = srv.request("OPTIONS", "/v1/completions", headers={
        "Access-Control-Request-Headers": "x-a, (not a name)"})
    tap(st == 204 and r.getheader("Access-Control-Allow-Headers") == "Authorization, Content-Type",
        "a header list that is not header names is not echoed", r.getheaders())
    tap(srv.stop() == 0, "server exits 0")


def logs(srv):
    # --log-requests: one line per request with its id, route, status, tokens, policy
    # and latency; every line is "RFC 3339 time [level] text".
    st, r = complete(srv, max_tokens=5)
    st2, _ = complete(srv, model="nope")
    time.sleep(0.3)
    got = [l for l in srv.log if "request POST /v1/completions 200 " + r.get("id", "?") in l]
    tap(st == 200 and len(got) == 1 and re.search(
        r"prompt_tokens=4 completion_tokens=5 kv=h2o\(heavy=\d+,recent=\d+,evicted=0\) "
        r"[0-9.]+ ms$", got[0].rstrip()),
        "--log-requests: id, route, status, tokens, KV policy, latency", got or srv.log[-5:])
    tap(st2 == 404 and any("request POST /v1/completions 404 " in l for l in srv.log),
        "... a refused request has its line too", srv.log[-5:])
    tap(all(LOG_LINE.match(l) for l in srv.log) and len(srv.log) > 3,
        "every log line: an RFC 3339 UTC time, then the level",
        [l for l in srv.log if not LOG_LINE.match(l)][:5])


def failed_load():
    # The built-in model with its weights cut in half: config and tokenizer load,
    # the weights do not.
    d = tempfile.mkdtemp(prefix="h2oserve-trunc-")
    try:
        model = os.path.join(d, "model")
        shutil.copytree(os.path.join(ROOT, "models", "default"), model,
                        ignore=shutil.ignore_patterns("heldout.txt"))
        st = os.path.join(model, "model.safetensors")
        with open(st, "r+b") as f:
            f.truncate(os.path.getsize(st) // 2)
        p = subprocess.Popen([BIN, "serve", "--model", model, "--port", "0",
                              "--data-dir", os.path.join(d, "data")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, err = p.communicate(timeout=120)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            rc = None
        tap(rc not in (None, 0) and "[error] the model failed to load" in err
            and "model.safetensors" in err,
            "a model that fails to load: serve exits non-zero with the error", (rc, err[-600:]))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def open_request(port, body):
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def http_body(raw):
    """The body of one HTTP/1.1 response (chunked or with Content-Length)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return head, rest
    out = b""
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size or b"0", 16)
        if n == 0:
            break
        out += rest[:n]
        rest = rest[n + 2:]
    return head, out


def grace_end():
    # One sequence at a time and no grace: on SIGTERM the running stream and the ones
    # waiting behind it are cancelled at once, and each still ends properly.
    srv = Server("--max-num-seqs", "1", "--shutdown-grace-s", "0", model=None)
    long = {"model": "default", "prompt": PROMPT, "max_tokens": 1000, "ignore_eos": True}
    streams = [open_request(srv.port, dict(long, stream=True)) for _ in range(3)]
    plain = open_request(srv.port, long)
    first = read_until(streams[0], lambda b: b.count(b"data: {") >= 2, limit=60)
    srv.proc.send_signal(signal.SIGTERM)
    ends = [(first if i == 0 else b"") + read_until(s, lambda b: b.endswith(b"0\r\n\r\n"),
                                                    limit=60)
            for i, s in enumerate(streams)]
    plain_raw = read_until(plain, lambda b: False, limit=60)
    try:
        rc = srv.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        rc = None
    ok = True
    detail = []
    for raw in ends:
        head, body = http_body(raw)
        ev = sse_events(body.decode(errors="replace"))
        chunks = [json.loads(e) for e in ev if e != "[DONE]"]
        fin = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
        good = (head.startswith(b"HTTP/1.1 200") and ev and ev[-1] == "[DONE]"
                and fin and fin[-1] == "length" and all(f is None for f in fin[:-1]))
        ok = ok and good
        detail.append((head[:12], ev[-2:]))
    tokens0 = len(sse_events(http_body(ends[0])[1].decode(errors="replace")))
    tap(ok and tokens0 < 1000, "after the grace period every stream ends with a finish_reason "
        "and [DONE]", detail)
    head, body = http_body(plain_raw)
    try:
        r = json.loads(body)
    except ValueError:
        r = None
    tap(head.startswith(b"HTTP/1.1 200") and r and r["choices"][0]["finish_reason"] == "length"
        and r["usage"]["completion_tokens"] < 1000,
        "... and a non-streamed request gets its whole body", (head[:40], body[:300]))
    tap(rc == 0, "... and the server exits 0", rc)
    tap(any("drain deadline: cancelling" in l for l in srv.log), "the cancel is logged",
        srv.log[-5:])
    for s in streams + [plain]:
        s.close()


def main():
    t0 = time.time()
    # The README's command: serve without --model, from another directory.
    cwd = tempfile.mkdtemp(prefix="h2oserve-cwd-")
    srv = Server("--log-requests", model=None, cwd=cwd)
    kv_floor(srv)
    openai_fields(srv, t0)
    logs(srv)
    tap(srv.stop() == 0, "server exits 0")
    shutil.rmtree(cwd, ignore_errors=True)

    # The README's config: --config config/example.json (model "default") from another
    # directory.
    cwd = tempfile.mkdtemp(prefix="h2oserve-cwd-")
    srv = Server("--config", os.path.join(ROOT, "config", "example.json"), model=None,
                 defaults=False, cwd=cwd)
    st, r = complete(srv, max_tokens=4)
    tap(st == 200 and text(r),
        "--config config/example.json serves default from another directory", r)
    tap(srv.stop() == 0, "server exits 0")
    shutil.rmtree(cwd, ignore_errors=True)

    # The floor from a config file: 0 turns it off for every request.
    d = tempfile.mkdtemp(prefix="h2oserve-cfg-")
    conf = os.path.join(d, "c.json")
    with open(conf, "w") as f:
        json.dump({"kv_min_budget": 0}, f)
    srv = Server("--config", conf, model=None)
    st, r = complete(srv)
    tap(st == 200 and r["usage"]["kv_cache"]["heavy"] == 3
        and r["usage"]["kv_cache"]["min_budget"] == 0,
        "config kv_min_budget 0: the bare budget by default", r)
    tap(srv.stop() == 0, "server exits 0")
    shutil.rmtree(d, ignore_errors=True)

    metrics_and_cors()
    failed_load()
    grace_end()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
