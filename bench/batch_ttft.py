#!/usr/bin/env python3
"""batch_ttft.py - how fast interactive requests start while a big batch runs.

Starts `h2oserve serve`, measures the time to first token (TTFT) of streaming
interactive completions on the idle server, then submits a batch of --batch-size
requests through the Files + Batches API and, while it runs, sends the same
interactive requests again. Prints the TTFT of both phases (median, p90, max),
their ratio, and the batch's throughput while it was sharing the server.

  python3 bench/batch_ttft.py build/server/h2oserve [--model dummy:opt-125m]
      [--batch-size 1000] [--prompt-len 256] [--n 20] [--pg] [-- extra serve flags]

--pg keeps the job store in a private PostgreSQL server (tests/integration/pglib.py,
fsync on), as replicas share it (docs/deploy.md): its batch runner then works on
the thread pool, and the interactive requests show what that leaves them.

The interactive prompt and the batch requests are token-id prompts, so their
lengths are exact whatever the tokenizer.
"""
import argparse
import http.client
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import batchlib as bl  # noqa: E402
from serverlib import Server  # noqa: E402


def ttft(srv, model, prompt, max_tokens):
    """Seconds from sending a streaming completion to its first token."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "stream": True, "temperature": 0, "ignore_eos": True})
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    for line in r:
        if first is None and line.startswith(b"data: {"):
            first = time.perf_counter() - t0
    c.close()
    if r.status != 200 or first is None:
        raise RuntimeError(f"interactive request failed: {r.status}")
    return first


def summary(xs):
    xs = sorted(xs)
    return {"median": statistics.median(xs), "p90": xs[int(0.9 * (len(xs) - 1))], "max": xs[-1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--model", default="dummy:opt-125m")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--batch-prompt-len", type=int, default=128)
    ap.add_argument("--batch-max-tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=256, help="interactive prompt tokens")
    ap.add_argument("--max-tokens", type=int, default=8, help="interactive max_tokens")
    ap.add_argument("--n", type=int, default=20, help="interactive requests per phase")
    ap.add_argument("--pg", action="store_true", help="the job store in PostgreSQL")
    ap.add_argument("extra", nargs="*", help="more serve flags (after --)")
    a = ap.parse_args()
    rng = random.Random(0)
    pg = None
    if a.pg:
        from pglib import PgServer
        pg = PgServer(fsync=True)
        a.extra = ["--job-store", pg.new_db()[0], *a.extra]
    try:
        srv = Server(a.binary, a.model, a.extra)
    except BaseException:
        if pg:
            pg.stop()
        raise
    try:
        prompts = [[rng.randrange(10, 250) for _ in range(a.prompt_len)] for _ in range(a.n)]
        ttft(srv, a.model, prompts[0], a.max_tokens)  # warm-up
        idle = [ttft(srv, a.model, p, a.max_tokens) for p in prompts]

        lines = [json.dumps({"custom_id": f"b{i}", "method": "POST", "url": "/v1/completions",
                             "body": {"model": a.model, "max_tokens": a.batch_max_tokens,
                                      "temperature": 0, "ignore_eos": True,
                                      "prompt": [rng.randrange(10, 250)
                                                 for _ in range(a.batch_prompt_len)]}})
                 for i in range(a.batch_size)]
        st, f = bl.upload(srv, bl.jsonl(lines))
        st, b = bl.create(srv, f["id"])
        # Measure once the batch is really running: requests in flight, some done.
        bl.wait(srv, b["id"], until=("in_progress",) + bl.TERMINAL)
        while bl.get(srv, b["id"])["request_counts"]["completed"] < 1:
            time.sleep(0.2)
        t0 = time.time()
        c0 = bl.get(srv, b["id"])["request_counts"]["completed"]
        busy = []
        for p in prompts:
            busy.append(ttft(srv, a.model, p, a.max_tokens))
            time.sleep(rng.uniform(0.1, 0.5))  # arrivals spread over the batch's run
        t1 = time.time()
        c1 = bl.get(srv, b["id"])
        running = c1["status"] == "in_progress"
        done_during = c1["request_counts"]["completed"] - c0
        final = bl.wait(srv, b["id"], timeout=7200)
        total_s = (final["completed_at"] or time.time()) - (final["in_progress_at"] or t0)
    finally:
        srv.stop()
        if pg:
            pg.stop()

    si, sb = summary(idle), summary(busy)
    print(f"model {a.model}; interactive prompt {a.prompt_len} tokens, max_tokens "
          f"{a.max_tokens}, {a.n} requests per phase; batch {a.batch_size} x "
          f"({a.batch_prompt_len} + {a.batch_max_tokens}) tokens; serve flags: "
          f"{' '.join(x if not x.startswith('postgresql:') else 'postgresql://(private)' for x in a.extra) or '(defaults)'}")
    print(f"{'phase':<16}{'median ms':>12}{'p90 ms':>10}{'max ms':>10}")
    for name, s in (("idle", si), ("during batch", sb)):
        print(f"{name:<16}{s['median'] * 1e3:>12.1f}{s['p90'] * 1e3:>10.1f}{s['max'] * 1e3:>10.1f}")
    print(f"ratio (during / idle): median {sb['median'] / si['median']:.2f}x, "
          f"p90 {sb['p90'] / si['p90']:.2f}x")
    print(f"batch still running at the end of the busy phase: {'yes' if running else 'NO'}; "
          f"{done_during} batch requests finished during it ({(t1 - t0):.1f} s)")
    print(f"batch: {final['status']}, {final['request_counts']['completed']} requests in "
          f"{total_s:.0f} s ({final['usage']['output_tokens'] / max(total_s, 1):.0f} generated "
          f"tokens/s)")
    return 0 if running else 1


if __name__ == "__main__":
    sys.exit(main())
