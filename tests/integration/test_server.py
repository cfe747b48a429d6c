#!/usr/bin/env python3
"""test_server.py - the real h2oserve binary on 127.0.0.1, over real HTTP.

Starts `h2oserve serve --model dummy:tiny --port 0`, reads the port from its
"listening on" line, and talks HTTP/1.1 to it with the standard library (a raw
socket where the test needs control of the bytes: pipelining, disconnects, bad
input). TAP output. Usage: test_server.py H2OSERVE_BINARY
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

BIN = os.path.abspath(sys.argv[1])
MODEL = "dummy:tiny"

# A test run through tests/integration/on_pg.py keeps every server's job store in a
# database of that private PostgreSQL server instead of its data dir: one database
# per data dir, so a server restarted on the same data dir reopens the same one.
_PG_DBS = {}


def _job_store_args(data_dir):
    host = os.environ.get("H2O_TEST_PG_HOST")
    if not host:
        return []
    if data_dir not in _PG_DBS:
        name = f"srv{os.getpid()}_{len(_PG_DBS)}"
        psql = os.path.join(os.environ["H2O_TEST_PG_BINDIR"], "psql")
        subprocess.run([psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c",
                        f"CREATE DATABASE {name} ENCODING 'UTF8'",
                        f"postgresql:///postgres?host={host}&user=postgres"],
                       check=True, capture_output=True)
        _PG_DBS[data_dir] = f"postgresql:///{name}?host={host}&user=postgres"
    return ["--job-store", _PG_DBS[data_dir]]
results = []


def tap(ok, name, detail=""):
    results.append(bool(ok))
    print(("ok" if ok else "not ok") + f" {len(results)} - {name}")
    if not ok and detail:
        for line in str(detail).splitlines()[:20]:
            print("# " + line)
    sys.stdout.flush()


class Endpoint:
    """HTTP/1.1 to 127.0.0.1:self.port, one connection per request unless given one:
    a server, or a proxy in front of servers (nginxlib.Nginx)."""
    port = None

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def request(self, method, path, body=None, headers=None, conn=None):
        c = conn or self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        if conn is None:
            c.close()
        return r.status, data, r

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)


class Server(Endpoint):
    def __init__(self, *extra, data_dir=None, model=MODEL, cwd=None, defaults=True, port=0):
        # Each server gets its own job store (a fresh one unless a test restarts on
        # the same directory): the store is locked by the process that has it open.
        # port 0 lets the kernel pick one (read back from the log); a fixed port is
        # for a server restarted where a proxy expects it (nginxlib.Replicas).
        import tempfile
        self.own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="h2oserve-test-")
        # model None: no --model, the server's default (the built-in model).
        # defaults False: the command line is `serve EXTRA --port 0 --data-dir D` and
        # nothing else (a test of the command line itself).
        args = [*(["--model", model] if model else []), "--dtype", "fp32",
                "--max-num-seqs", "32", "--max-batched-tokens", "256"] if defaults else []
        self.proc = subprocess.Popen(
            [BIN, "serve", *args, *extra, "--port", str(port), "--data-dir", self.data_dir,
             *_job_store_args(self.data_dir)],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=cwd,
            env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.port = None
        self.log = []  # every stderr line
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.stop()
            raise RuntimeError("server did not start: " + "".join(self.log))
        # The rest of stderr is drained by a thread so the server never blocks on it.
        import threading
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stderr],
                         daemon=True).start()
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("server never became healthy: " + "".join(self.log))

    def stderr_has(self, needle, wait=5.0):
        """Whether the log shows `needle` (the drain thread may be a moment behind)."""
        deadline = time.time() + wait
        while True:
            if any(needle in l for l in list(self.log)):
                return True
            if time.time() > deadline:
                return False
            time.sleep(0.05)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = -999
        if self.own_dir:
            import shutil
            shutil.rmtree(self.data_dir, ignore_errors=True)
        return rc

    def kill(self):
        """SIGKILL: no drain, no cleanup (a crash); its own data dir is removed."""
        self.proc.kill()
        self.proc.wait()
        if self.own_dir:
            import shutil
            shutil.rmtree(self.data_dir, ignore_errors=True)


def metric(srv, name):
    st, body, _ = srv.get("/metrics")
    # Every series carries the served model's name, as vLLM's do.
    m = re.search(r"^h2oserve:" + re.escape(name) + r'\{model_name="[^"]*"\} ([0-9.e+-]+)$',
                  body.decode(), re.M)
    return float(m.group(1)) if m else None


def completion(srv, **fields):
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 8}
    body.update(fields)
    st, data, r = srv.post("/v1/completions", body)
    try:
        return st, json.loads(data), r
    except ValueError:
        return st, data, r


def sse_events(raw):
    events = []
    for block in raw.split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                events.append(line[6:])
    return events


def read_until(s, done, limit=30):
    """Read from socket s until done(data), EOF or `limit` seconds; return the bytes."""
    data = b""
    end = time.time() + limit
    s.settimeout(limit)
    try:
        while time.time() < end and not done(data):
            got = s.recv(65536)
            if not got:
                break
            data += got
    except (socket.timeout, ConnectionResetError):
        pass
    return data


def healthy(srv):
    try:
        return srv.get("/health")[0] == 200
    except OSError:
        return False


def main():
    srv = Server()
    # --- admin endpoints
    st, body, _ = srv.get("/health")
    tap(st == 200 and json.loads(body)["status"] == "ready", "health is 200 when ready", body)
    # HEAD: GET's head without the body, and the connection stays in step.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nHEAD /v1/nope HTTP/1.1\r\nHost: x\r\n\r\n"
              b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = read_until(s, lambda d: False, 10)
    s.close()
    parts = data.split(b"\r\n\r\n")
    tap(len(parts) == 4 and parts[0].startswith(b"HTTP/1.1 200")
        and parts[1].startswith(b"HTTP/1.1 404") and parts[2].startswith(b"HTTP/1.1 200")
        and b'"ready"' in parts[3] and b"content-length: 18" in parts[0].lower(),
        "HEAD answers heads only, and the next responses follow in step", data)
    st, body, _ = srv.get("/v1/models")
    ok = st == 200 and json.loads(body)["data"][0]["id"] == MODEL
    tap(ok and json.loads(body)["object"] == "list", "GET /v1/models", body)
    st, body, _ = srv.get("/v1/models/" + MODEL)
    tap(st == 200 and json.loads(body)["max_model_len"] == 2048, "GET /v1/models/{id}", body)
    st, body, _ = srv.get("/v1/models/nope")
    tap(st == 404 and json.loads(body)["error"]["code"] == "model_not_found", "unknown model id 404", body)
    st, body, _ = srv.post("/v1/models", {})
    tap(st == 405, "wrong method 405", body)
    st, body, _ = srv.get("/nope")
    tap(st == 404 and "error" in json.loads(body), "unknown route 404", body)
    st, body, _ = srv.get("/metrics")
    tap(st == 200 and b"h2oserve:kv_cache_usage_perc" in body and b"_bucket{le=" in body,
        "metrics in Prometheus text format", body[:300])

    # --- completions
    st, r, _ = completion(srv, max_tokens=12, temperature=0, ignore_eos=True)
    ok = (st == 200 and r["object"] == "text_completion" and len(r["choices"]) == 1
          and r["choices"][0]["finish_reason"] == "length" and r["usage"]["completion_tokens"] == 12
          and r["choices"][0]["logprobs"] is None and r["id"].startswith("cmpl-"))
    tap(ok, "non-streaming completion", r)
    st2, r2, _ = completion(srv, max_tokens=12, temperature=0, ignore_eos=True)
    tap(st2 == 200 and r2["choices"][0]["text"] == r["choices"][0]["text"], "greedy is deterministic", r2)
    a = completion(srv, max_tokens=16, seed=42, ignore_eos=True)[1]
    b = completion(srv, max_tokens=16, seed=42, ignore_eos=True)[1]
    tap(a["choices"][0]["text"] == b["choices"][0]["text"], "same seed, same text", (a, b))
    st, r, _ = completion(srv, prompt=["one", "two"], n=2, max_tokens=4, ignore_eos=True)
    idx = [c["index"] for c in r.get("choices", [])]
    tap(st == 200 and idx == [0, 1, 2, 3] and r["usage"]["completion_tokens"] == 16,
        "several prompts and n: prompt-major choices", r)
    st, r, _ = completion(srv, prompt=[2, 76, 109], max_tokens=3, ignore_eos=True)
    tap(st == 200 and r["usage"]["prompt_tokens"] == 3, "token-id prompt", r)
    st, r, _ = completion(srv, max_tokens=5, logprobs=2, ignore_eos=True, temperature=0)
    lp = r["choices"][0]["logprobs"] if st == 200 else None
    ok = (lp is not None and len(lp["tokens"]) == 5 and len(lp["token_logprobs"]) == 5
          and len(lp["top_logprobs"]) == 5 and len(lp["text_offset"]) == 5)
    tap(ok, "logprobs arrays", r)
    st, r, _ = completion(srv, prompt="Hi there", max_tokens=3, echo=True, ignore_eos=True)
    tap(st == 200 and r["choices"][0]["text"].startswith("Hi there"), "echo", r)
    st, r, _ = completion(srv, prompt="Hi there", max_tokens=3, echo=True, logprobs=2,
                          ignore_eos=True, temperature=0)
    lp = r["choices"][0]["logprobs"] if st == 200 else {}
    n_prompt = r["usage"]["prompt_tokens"] if st == 200 else 0
    tl = lp.get("token_logprobs", [])
    ok = (len(tl) == n_prompt + 3 and tl[0] is None and lp["top_logprobs"][0] is None
          and all(isinstance(v, float) and v <= 0 for v in tl[1:])
          and all(isinstance(t, dict) and 1 <= len(t) <= 3 for t in lp["top_logprobs"][1:]))
    tap(ok, "echo with logprobs scores the prompt tokens (first one null)", lp)
    st, r, _ = completion(srv, max_tokens=40, temperature=0, ignore_eos=True)
    full = r["choices"][0]["text"]
    if len(full) > 6:
        stop = full[3:6]
        st, r, _ = completion(srv, max_tokens=40, temperature=0, ignore_eos=True, stop=[stop])
        t = r["choices"][0]["text"]
        tap(st == 200 and stop not in t and r["choices"][0]["finish_reason"] == "stop"
            and full.startswith(t), "stop string excluded, finish stop", (full, stop, r))
    else:
        tap(False, "stop string test needs text", full)

    # --- the other sampling fields and the extensions
    st, r, _ = completion(srv, max_tokens=6, logit_bias={"100": 100}, logprobs=0,
                          ignore_eos=True)
    toks = r["choices"][0]["logprobs"]["tokens"] if st == 200 else None
    tap(st == 200 and toks and len(set(toks)) == 1, "logit_bias +100 forces one token", r)
    st, r, _ = completion(srv, max_tokens=6, n=2, best_of=4, seed=3, ignore_eos=True)
    tap(st == 200 and len(r["choices"]) == 2 and r["usage"]["completion_tokens"] == 24,
        "best_of returns n of best_of sequences", r)
    st, r, _ = completion(srv, max_tokens=8, top_p=0.5, top_k=3, presence_penalty=1.5,
                          frequency_penalty=-1.0, seed=9, ignore_eos=True)
    tap(st == 200 and r["usage"]["completion_tokens"] == 8, "top_p, top_k and penalties", r)
    outs = []
    for kv in ({"policy": "full"}, "local", {"policy": "h2o", "heavy": 2, "recent": 2},
               {"policy": "h2o", "heavy_ratio": 0.05, "recent_ratio": 0.05}):
        # kv_min_budget 0: the budgets exactly as asked (the default floor would cover
        # these short requests whole).
        st, r, _ = completion(srv, max_tokens=30, temperature=0, ignore_eos=True, kv_cache=kv,
                              kv_min_budget=0)
        want = kv if isinstance(kv, str) else kv["policy"]
        ran = r["usage"]["kv_cache"]["policy"] if st == 200 else None
        outs.append((st if ran == want else -1, r["choices"][0]["text"] if st == 200 else r))
    before = metric(srv, "kv_tokens_evicted_total")
    tap(all(o[0] == 200 for o in outs) and before and before > 0,
        "kv_cache policies per request; evictions counted", (outs, before))

    # --- streaming
    c = srv.conn()
    c.request("POST", "/v1/completions", json.dumps({
        "model": MODEL, "prompt": "Hello", "max_tokens": 6, "stream": True, "n": 2,
        "ignore_eos": True, "stream_options": {"include_usage": True}}),
        {"Content-Type": "application/json"})
    resp = c.getresponse()
    raw = resp.read().decode()
    c.close()
    ev = sse_events(raw)
    chunks = [json.loads(e) for e in ev if e != "[DONE]"]
    finishes = [ch["choices"][0]["finish_reason"] for ch in chunks if ch["choices"]]
    ok = (resp.status == 200 and resp.getheader("Content-Type").startswith("text/event-stream")
          and ev[-1] == "[DONE]" and chunks[-1]["choices"] == []
          and chunks[-1]["usage"]["completion_tokens"] == 12
          and finishes.count("length") == 2 and all(ch.get("usage") is None for ch in chunks[:-1]))
    tap(ok, "streaming with include_usage", raw[:800])

    # --- errors
    st, body, _ = srv.post("/v1/completions", "{not json")
    e = json.loads(body)["error"] if body.startswith(b"{") else {}
    tap(st == 400 and set(e) == {"message", "type", "param", "code"}, "invalid JSON 400", body)
    st, r, _ = completion(srv, temperature="hot")
    tap(st == 400 and r["error"]["param"] == "temperature", "bad field names its param", r)
    st, r, _ = completion(srv, max_tokens=5000)
    tap(st == 400 and r["error"]["code"] == "context_length_exceeded", "context length 400", r)
    st, r, _ = completion(srv, model="gpt-4")
    tap(st == 404 and r["error"]["code"] == "model_not_found", "unknown model 404", r)
    st, r, _ = completion(srv, suffix="x")
    tap(st == 400, "suffix unsupported 400", r)

    # --- keep-alive and pipelining
    c = srv.conn()
    ok = True
    for i in range(3):
        st, body, _ = srv.get("/health", conn=c)
        ok = ok and st == 200
    c.close()
    tap(ok, "keep-alive: three requests on one connection")
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 2, "ignore_eos": True})
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n{body}")
    s.sendall((req + "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" + req).encode())
    data = b""
    s.settimeout(30)
    # Three complete responses: the last completion body ends the stream of bytes.
    while data.count(b"HTTP/1.1 200") < 3 or data.count(b'"total_tokens"') < 2:
        got = s.recv(65536)
        if not got:
            break
        data += got
    s.close()
    parts = data.split(b"HTTP/1.1 200")
    ok = len(parts) == 4 and b"text_completion" in parts[1] and b'"object":"list"' in parts[2] \
        and b"text_completion" in parts[3]
    tap(ok, "pipelined requests answered in order", data[:600])

    # --- bad input at the HTTP layer
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n")
    s.settimeout(10)
    got = s.recv(4096)
    s.close()
    tap(got.startswith(b"HTTP/1.1 413"), "oversized body 413", got[:200])
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    got = s.recv(4096)
    s.close()
    tap(got.startswith(b"HTTP/1.1 431"), "oversized headers 431", got[:200])
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"\x00\x01garbage\r\n\r\n")
    got = s.recv(4096)
    s.close()
    tap(got.startswith(b"HTTP/1.1 400"), "garbage 400", got[:200])
    st, _, _ = srv.get("/health")
    tap(st == 200, "still healthy after bad input")

    # --- a client that disconnects mid-stream frees its KV blocks
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"model": MODEL, "prompt": "long", "max_tokens": 1500, "stream": True,
                       "ignore_eos": True})
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    s.settimeout(30)
    first = b""
    while b"data: " not in first:  # the head goes out at once; wait for a token
        got = s.recv(4096)
        if not got:
            break
        first += got
    used_during = metric(srv, "kv_cache_blocks_used")
    s.close()
    freed = None
    for _ in range(100):
        freed = metric(srv, "kv_cache_blocks_used")
        if freed == 0:
            break
        time.sleep(0.05)
    tap(first.startswith(b"HTTP/1.1 200") and used_during and used_during > 0 and freed == 0,
        "disconnect mid-stream frees the KV blocks", (first[:100], used_during, freed))

    # --- Expect: 100-continue
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.settimeout(30)
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 2}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Expect: 100-continue\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    interim = s.recv(4096)
    s.sendall(body)
    final = b""
    while b"total_tokens" not in final:
        got = s.recv(65536)
        if not got:
            break
        final += got
    s.close()
    tap(interim.startswith(b"HTTP/1.1 100 Continue") and final.startswith(b"HTTP/1.1 200"),
        "Expect: 100-continue", (interim[:40], final[:40]))

    # --- chunked request body
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.settimeout(30)
    half = len(body) // 2
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
              + b"%x\r\n" % half + body[:half] + b"\r\n"
              + b"%x\r\n" % (len(body) - half) + body[half:] + b"\r\n0\r\n\r\n")
    final = b""
    while b"total_tokens" not in final:
        got = s.recv(65536)
        if not got:
            break
        final += got
    s.close()
    tap(final.startswith(b"HTTP/1.1 200"), "chunked request body", final[:80])

    code = srv.stop()
    tap(code == 0, "SIGTERM: graceful exit 0", code)

    # --- queue full: 429 with Retry-After (one sequence at a time, one may wait)
    srv = Server("--max-num-seqs", "1", "--max-batched-tokens", "64", "--max-queue", "1")
    socks = []
    got429 = None
    long_req = json.dumps({"model": MODEL, "prompt": "q", "max_tokens": 1500, "stream": True,
                           "ignore_eos": True}).encode()
    for i in range(20):
        c = socket.create_connection(("127.0.0.1", srv.port))
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(long_req)).encode() + b"\r\n\r\n" + long_req)
        c.settimeout(30)
        head = c.recv(4096)
        socks.append(c)
        if head.startswith(b"HTTP/1.1 429"):
            while b"}}" not in head:  # the body may come in a second segment
                more = c.recv(4096)
                if not more:
                    break
                head += more
            got429 = head
            break
        time.sleep(0.05)
    for c in socks:
        c.close()
    tap(got429 is not None and b"Retry-After:" in got429 and b"rate_limit_exceeded" in got429,
        "queue full: 429 with Retry-After", got429)
    tap(srv.stop() == 0, "queue server exits 0")

    # --- a config file, with flags overriding it
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"api_key": "fromfile", "max_n": 2}, f)
        path = f.name
    srv = Server("--config", path, "--max-n", "3")
    auth = {"Authorization": "Bearer fromfile"}
    st, body, _ = srv.get("/v1/models", headers=auth)
    st2, r, _ = srv.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1,
                                             "n": 3}, headers=auth)
    st3, r3, _ = srv.post("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1,
                                              "n": 4}, headers=auth)
    tap(st == 200 and st2 == 200 and st3 == 400, "--config file, flags override it",
        (st, st2, st3, r3))
    os.unlink(path)
    tap(srv.stop() == 0, "config server exits 0")

    # --- API key
    srv = Server("--api-key", "sekret")
    st, body, _ = srv.get("/v1/models")
    tap(st == 401 and json.loads(body)["error"]["code"] == "invalid_api_key", "missing key 401", body)
    st, body, _ = srv.get("/v1/models", headers={"Authorization": "Bearer wrong"})
    tap(st == 401, "wrong key 401", body)
    st, body, _ = srv.get("/v1/models", headers={"Authorization": "Bearer sekret"})
    tap(st == 200, "right key 200", body)
    st, _, _ = srv.get("/health")
    tap(st == 200, "health needs no key")
    tap(srv.stop() == 0, "second server exits 0")

    # --- an int8 KV cache: shown at startup and in /v1/models, serves completions,
    # and a request may only repeat the server's KV dtype.
    # The built-in trained model: its attention matters to its next token, as a
    # random dummy's barely does.
    srv = Server("--kv-cache-dtype", "int8", "--kv-cache-bytes", "4M", model="default")
    tap(srv.stderr_has("KV cache int8"), "int8 server logs its KV dtype", "".join(srv.log))
    st, body, _ = srv.get("/v1/models/default")
    tap(st == 200 and json.loads(body).get("kv_cache_dtype") == "int8",
        "/v1/models shows kv_cache_dtype int8", body)
    st, body, _ = srv.post("/v1/completions", {
        "model": "default", "prompt": "Hello there", "max_tokens": 12, "ignore_eos": True,
        "kv_cache": {"policy": "h2o", "heavy": 2, "recent": 3, "dtype": "int8"}})
    j = json.loads(body) if st == 200 else {}
    tap(st == 200 and j["usage"]["completion_tokens"] == 12,
        "int8 completion with kv_cache.dtype int8", body)
    # n = 2 forks the prefilled sequence by copying its blocks: the copy must carry
    # the scales, or the second greedy completion would differ from the first.
    st, body, _ = srv.post("/v1/completions", {
        "model": "default", "prompt": "Hello there", "max_tokens": 12, "ignore_eos": True,
        "n": 2, "temperature": 0})
    ch = json.loads(body).get("choices", []) if st == 200 else []
    tap(len(ch) == 2 and ch[0]["text"] == ch[1]["text"],
        "int8 n=2 greedy: the forked copy reads the same cache", body)
    st, body, _ = srv.post("/v1/completions", {
        "model": "default", "prompt": "Hello", "max_tokens": 2, "kv_cache": {"policy": "full",
                                                                          "dtype": "bf16"}})
    e = json.loads(body).get("error", {}) if st == 400 else {}
    tap(st == 400 and e.get("param") == "kv_cache.dtype" and "(int8)" in e.get("message", "")
        and "--kv-cache-dtype" in e.get("message", ""),
        "kv_cache.dtype other than the server's is a 400 naming it", body)
    tap(srv.stop() == 0, "int8 server exits 0")
    # The default server (fp32 here) says fp32, and takes its own dtype by name.
    srv = Server()
    st, body, _ = srv.get("/v1/models/" + MODEL)
    tap(st == 200 and json.loads(body).get("kv_cache_dtype") == "fp32",
        "/v1/models shows the default KV dtype (the compute dtype)", body)
    st, body, _ = srv.post("/v1/completions", {
        "model": MODEL, "prompt": "Hello", "max_tokens": 2,
        "kv_cache": {"policy": "full", "dtype": "fp32"}})
    tap(st == 200, "kv_cache.dtype equal to the server's is accepted", body)
    tap(srv.stop() == 0, "fp32 server exits 0")

    connection_robustness()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


def connection_robustness():
    """Connection lifecycle edge cases: write limits, deep pipelines, protocol errors
    behind requests in flight, HTTP/1.0 streaming, pipelines across a drain."""
    # --- the write queue limit: unsent bytes, not bytes already handed to the socket
    srv = Server("--write-queue-max-bytes", "4096")
    try:
        st, body, _ = srv.get("/metrics")  # a body over 4 KiB, to a client that reads it
    except (OSError, http.client.HTTPException) as e:
        st, body = e, b""
    tap(st == 200 and len(body) > 4096, "a response over the write limit reaches a reader",
        (st, len(body)))
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 200)
    data = read_until(s, lambda d: d.count(b"HTTP/1.1 200") >= 200)
    s.close()
    tap(data.count(b"HTTP/1.1 200") == 200, "200 pipelined answers past the write limit",
        data.count(b"HTTP/1.1 200"))
    # A client that reads nothing is dropped while its responses are being written,
    # a streaming completion among them; the server goes on.
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", srv.port))
    body = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 50, "stream": True,
                       "ignore_eos": True})
    s.settimeout(10)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
                  + (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}"
                     f"\r\n\r\n{body}").encode())
    except OSError:
        pass
    time.sleep(1)
    s.close()
    tap(healthy(srv), "a client that reads nothing is dropped; the server goes on")
    tap(srv.stop() == 0, "write-limit server exits 0")

    srv = Server()
    # --- a deep pipeline answered at once, behind a full window of requests in flight:
    # each answer lets the next request in, which must not nest one call per request
    # (ASan: stack-overflow in consume -> router_dispatch -> conn_finish -> advance).
    def post(max_tokens, stream=False):
        b = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": max_tokens,
                        "stream": stream, "ignore_eos": True})
        return (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(b)}"
                f"\r\n\r\n{b}").encode()
    n = 1700
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(post(2) * 16 + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * n)
    data = read_until(s, lambda d: d.count(b"HTTP/1.1 404") >= n)
    s.close()
    tap(data.count(b"HTTP/1.1 200") == 16 and data.count(b"HTTP/1.1 404") == n,
        "16 completions then 1700 pipelined requests", (data.count(b"HTTP/1.1 200"),
                                                        data.count(b"HTTP/1.1 404")))
    # --- a protocol error behind requests in flight: answered once, after them.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(post(2) + post(1500, stream=True) + b"\x00garbage\r\n\r\n")
    data = read_until(s, lambda d: False, 60)
    s.close()
    tap(data.startswith(b"HTTP/1.1 200") and data.count(b"HTTP/1.1 400") == 1
        and data.index(b"data: [DONE]") < data.index(b"HTTP/1.1 400"),
        "a protocol error after requests in flight: one 400, last", data[-300:])
    tap(healthy(srv), "healthy after the pipelines")
    # --- HTTP/1.0 cannot read chunked: a stream to it is unframed and ends with the
    # connection, even when it asked for keep-alive.
    for extra in (b"", b"Connection: keep-alive\r\n"):
        b = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 5, "stream": True,
                        "ignore_eos": True}).encode()
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"POST /v1/completions HTTP/1.0\r\n" + extra + b"Content-Length: "
                  + str(len(b)).encode() + b"\r\n\r\n" + b)
        data = read_until(s, lambda d: False, 30)
        s.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        ok = (data.startswith(b"HTTP/1.1 200") and b"chunked" not in head.lower()
              and b"connection: close" in head.lower() and rest.startswith(b"data: {")
              and rest.endswith(b"data: [DONE]\n\n"))
        tap(ok, "HTTP/1.0 stream is close-delimited " + extra.decode().strip(), data[:300])
    tap(srv.stop() == 0, "pipeline server exits 0")

    # --- a long CORS origin: every head is whole, not cut at a fixed buffer size
    origin = "https://" + "a" * 700 + ".example"
    srv = Server("--cors-allow-origin", origin)
    b = json.dumps({"model": MODEL, "prompt": "x", "max_tokens": 3, "stream": True,
                    "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "
              + str(len(b)).encode() + b"\r\n\r\n" + b)
    data = read_until(s, lambda d: False, 30)
    s.close()
    head = data.partition(b"\r\n\r\n")[0]
    tap(("Access-Control-Allow-Origin: " + origin + "\r\n").encode() in head + b"\r\n"
        and data.rstrip().endswith(b"0"), "a long CORS origin on a streamed head", data[:120])
    tap(srv.stop() == 0, "CORS server exits 0")


if __name__ == "__main__":
    sys.exit(main())
