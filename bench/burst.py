#!/usr/bin/env python3
"""burst.py - N completion requests at once against a running server's --max-queue.

Opens N connections, releases every request at the same instant (a barrier), and
counts the answers: accepted (200), refused (429, which must carry Retry-After),
other. The requests are long streams, so the accepted ones stay in flight (running
or waiting) until every answer is in; then the bench closes them (the server
cancels them). Meanwhile it polls /metrics for the waiting sequences:

- num_sequences_waiting_peak: the server's own count of sequences submitted and
  not yet seen admitted (what --max-queue is checked against), at its highest since
  the server started: exact, never sampled;
- num_requests_waiting: the engine's queue after its last step, sampled as fast as
  /metrics answers (it does not see the inbox, so it is a lower view).

Exits 1 when a peak exceeds --max-queue (pass the server's value; the report
needs it), or when a 429 lacks Retry-After.

  python3 bench/burst.py --url http://127.0.0.1:8000 -n 300 --max-queue 8
      [--max-tokens 1500] [--prompt q] [--prompts 1] [--hold 0]
"""
import argparse
import json
import re
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request


def metrics(base):
    """{name: value} of the h2oserve: series without extra labels."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for m in re.finditer(r'^h2oserve:(\w+)\{model_name="[^"]*"\} ([0-9.e+-]+)$', text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def model_id(base):
    with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
        return json.loads(r.read())["data"][0]["id"]


def read_head(s):
    """Status and lower-case headers of one response; a body with Content-Length is
    read too (a stream's is left on the socket)."""
    s.settimeout(60)
    data = b""
    while b"\r\n\r\n" not in data:
        got = s.recv(65536)
        if not got:
            break
        data += got
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split() if lines else []
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (l.partition(":") for l in lines[1:])}
    n = int(headers.get("content-length", "0") or 0)
    while len(rest) < n:
        got = s.recv(65536)
        if not got:
            break
        rest += got
    return status, headers


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("-n", type=int, default=300, help="requests sent at once")
    ap.add_argument("--max-queue", type=int, required=True,
                    help="the server's --max-queue, for the report and the check")
    ap.add_argument("--max-tokens", type=int, default=1500)
    ap.add_argument("--prompt", default="q")
    ap.add_argument("--prompts", type=int, default=1,
                    help="prompts per request (each one sequence)")
    ap.add_argument("--hold", type=float, default=0.0,
                    help="seconds to keep the accepted streams open after the burst")
    a = ap.parse_args()
    base = a.url.rstrip("/")
    u = urllib.parse.urlparse(base)
    host, port = u.hostname, u.port or 80
    prompt = a.prompt if a.prompts == 1 else [a.prompt] * a.prompts
    body = json.dumps({"model": model_id(base), "prompt": prompt, "max_tokens": a.max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    req = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    before = metrics(base)

    socks = [socket.create_connection((host, port)) for _ in range(a.n)]
    answers = [None] * a.n
    go = threading.Barrier(a.n + 1)

    def one(i):
        go.wait()
        try:
            socks[i].sendall(req)
            answers[i] = read_head(socks[i])
        except OSError as e:
            answers[i] = (0, {"error": str(e)})

    engine_peak, loop_now_peak = [0], [0]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            m = metrics(base)
            engine_peak[0] = max(engine_peak[0], int(m.get("num_requests_waiting", 0)))
            loop_now_peak[0] = max(loop_now_peak[0], int(m.get("num_sequences_waiting", 0)))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(a.n)]
    for t in threads:
        t.start()
    poller = threading.Thread(target=poll)
    poller.start()
    t0 = time.time()
    go.wait()
    for t in threads:
        t.join()
    t_answers = time.time() - t0
    time.sleep(max(a.hold, 0.2))  # a few samples while the accepted ones still wait
    stop.set()
    poller.join()
    after = metrics(base)
    for s in socks:
        s.close()

    ok = sum(1 for st, _ in answers if st == 200)
    full = [h for st, h in answers if st == 429]
    other = a.n - ok - len(full)
    no_retry = sum(1 for h in full if not h.get("retry-after"))
    peak = int(after.get("num_sequences_waiting_peak", -1))
    tokens = after.get("generation_tokens_total", 0) - before.get("generation_tokens_total", 0)
    print(f"burst: {a.n} requests of {a.prompts} prompt(s) at once, max_tokens {a.max_tokens}, "
          f"--max-queue {a.max_queue}")
    print(f"answered in {t_answers:.3f} s: accepted {ok}, 429 {len(full)} "
          f"(without Retry-After: {no_retry}), other {other}")
    print(f"peak waiting sequences: {peak} (server's count, exact), "
          f"{loop_now_peak[0]} (the same, sampled), {engine_peak[0]} (engine queue, sampled)")
    print(f"running at the end: {int(after.get('num_requests_running', 0))}, "
          f"tokens generated meanwhile: {int(tokens)}")
    bad = peak > a.max_queue or engine_peak[0] > a.max_queue or no_retry or peak < 0
    print("FAIL: a peak exceeds --max-queue, or a 429 without Retry-After" if bad else
          f"ok: the waiting peak stayed within --max-queue {a.max_queue}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
