#!/usr/bin/env python3
"""test_admission.py - admission (--max-queue) and the count of cancelled sequences,
over real HTTP against the real binary.

--max-queue bounds the sequences (prompts x max(n, best_of)) of completion requests
that wait for the engine; it is counted on the loop where requests are admitted, so
a burst that arrives between two engine steps is held to it too: everything past it
gets 429 with Retry-After and an OpenAI error body (docs/api.md "Admission").
Every finished sequence is counted once in request_success_total, also when its
client went before the end (finished_reason="cancelled").

TAP output. Usage: test_admission.py H2OSERVE_BINARY
"""
import json
import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, metric, results, tap  # noqa: E402

# Slow enough that a 1500-token stream outlasts the test's steps on any CPU (dummy:tiny
# makes 1500 tokens in a quarter of a second, before its client could leave).
MODEL = "dummy:opt-125m"

Q = 8         # --max-queue
SEQS = 2      # --max-num-seqs
BURST = 40    # requests sent at once


def finished(srv, reason):
    """request_success_total{finished_reason=reason}, or None."""
    body = srv.get("/metrics")[1].decode()
    m = re.search(r'^h2oserve:request_success_total\{finished_reason="' + reason +
                  r'",model_name="[^"]*"\} (\d+)$', body, re.M)
    return int(m.group(1)) if m else None


def finished_all(srv):
    return sum(finished(srv, r) or 0 for r in ("stop", "length", "cancelled", "error"))


def wait_for(pred, limit=20.0):
    end = time.time() + limit
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def long_stream(**fields):
    """A streaming completion that runs for many steps unless cancelled."""
    body = {"model": MODEL, "prompt": "q", "max_tokens": 1500, "stream": True,
            "ignore_eos": True}
    body.update(fields)
    return json.dumps(body).encode()


def post_bytes(body):
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def read_response_head(s, limit=30):
    """Status, headers (lower-case names) and, for a response with Content-Length,
    its body; a stream's body is left on the socket (its head is all we wait for)."""
    s.settimeout(limit)
    data = b""
    while b"\r\n\r\n" not in data:
        got = s.recv(65536)
        if not got:
            break
        data += got
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(rest) < n:
            got = s.recv(65536)
            if not got:
                break
            rest += got
    return status, headers, rest


def open_stream(srv, body):
    """Send one request on its own connection; return (socket, status, headers, body)."""
    c = socket.create_connection(("127.0.0.1", srv.port))
    c.sendall(post_bytes(body))
    st, h, rest = read_response_head(c)
    return c, st, h, rest


def is_openai_429(st, h, body):
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return (st == 429 and h.get("retry-after", "").isdigit()
            and set(e) == {"message", "type", "param", "code"}
            and e["code"] == "rate_limit_exceeded" and isinstance(e["message"], str))


def burst(srv):
    """BURST streaming requests released at once by a barrier; a poller samples the
    engine's own waiting gauge meanwhile. The accepted streams stay open."""
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(BURST)]
    answers = [None] * BURST
    go = threading.Barrier(BURST + 1)
    body = post_bytes(long_stream())

    def one(i):
        go.wait()
        socks[i].sendall(body)
        try:
            answers[i] = read_response_head(socks[i])
        except OSError as e:
            answers[i] = (0, {}, str(e).encode())

    engine_peak = [0]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            v = metric(srv, "num_requests_waiting")
            engine_peak[0] = max(engine_peak[0], int(v or 0))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(BURST)]
    poller = threading.Thread(target=poll)
    for t in threads:
        t.start()
    poller.start()
    go.wait()
    for t in threads:
        t.join(60)
    time.sleep(0.3)  # the accepted streams still run or wait: a few more samples
    stop.set()
    poller.join(30)
    return socks, answers, engine_peak[0]


def burst_is_held_to_max_queue():
    srv = Server("--max-num-seqs", str(SEQS), "--max-queue", str(Q), model=MODEL)
    done0 = finished_all(srv)
    socks, answers, engine_peak = burst(srv)
    ok = [a for a in answers if a and a[0] == 200]
    full = [a for a in answers if a and a[0] == 429]
    other = [a for a in answers if not a or a[0] not in (200, 429)]
    # Sequences that ended during the burst made room; with 1500 tokens none should.
    done_during = finished_all(srv) - done0
    tap(not other, "burst: every answer is 200 or 429", other[:3])
    tap(Q <= len(ok) <= Q + SEQS + done_during,
        f"burst: {len(ok)} accepted, at most --max-queue {Q} waiting + {SEQS} running",
        f"accepted {len(ok)}, 429 {len(full)}, finished meanwhile {done_during}")
    bad = [a for a in full if not is_openai_429(*a)]
    tap(full and not bad, f"burst: the {len(full)} refused get 429, Retry-After, an OpenAI "
        "error body", bad[:2])
    peak = metric(srv, "num_sequences_waiting_peak")
    tap(peak is not None and peak <= Q, f"burst: the loop's waiting peak {peak} <= {Q}")
    tap(engine_peak <= Q, f"burst: the engine's waiting gauge peaked at {engine_peak} <= {Q}")
    tap(metric(srv, "requests_rejected_queue_full_total") == len(full),
        "burst: requests_rejected_queue_full_total counts the 429s",
        metric(srv, "requests_rejected_queue_full_total"))

    # Cancelled sequences: every accepted stream's client goes now, running or
    # waiting; each is counted once as cancelled, and nothing is left waiting.
    c0 = finished(srv, "cancelled")
    for s in socks:
        s.close()
    want = c0 + len(ok)
    wait_for(lambda: finished(srv, "cancelled") >= want)
    time.sleep(0.3)  # a double count would show by now
    got = finished(srv, "cancelled")
    tap(got == want, f"cancel: {len(ok)} clients gone -> cancelled +{len(ok)}",
        f"cancelled went from {c0} to {got}")
    tap(wait_for(lambda: metric(srv, "num_sequences_waiting") == 0
                 and metric(srv, "num_requests_running") == 0),
        "cancel: nothing left waiting or running")
    return srv


def counted_in_sequences(srv):
    """Two streams hold both running slots; then 4 prompts (4 sequences) and 2 prompts
    x n=2 (4 sequences) fill the queue to Q exactly; one more prompt is refused.
    Counted in requests or prompts, the last one would have fit."""
    held = []
    for _ in range(SEQS):
        c, st, _, _ = open_stream(srv, long_stream())
        held.append(c)
    tap(wait_for(lambda: metric(srv, "num_sequences_waiting") == 0),
        "sequences: the two running streams are seen admitted")
    c1, st1, _, _ = open_stream(srv, long_stream(prompt=["a", "b", "c", "d"]))
    c2, st2, _, _ = open_stream(srv, long_stream(prompt=["a", "b"], n=2))
    tap(st1 == 200 and st2 == 200 and metric(srv, "num_sequences_waiting") == Q,
        f"sequences: 4 prompts + 2 prompts x n=2 are {Q} waiting", (st1, st2))
    c3, st3, h3, b3 = open_stream(srv, long_stream())
    tap(is_openai_429(st3, h3, b3), "sequences: one more is refused with 429", (st3, b3[:200]))
    c0 = finished(srv, "cancelled")
    for c in held + [c1, c2, c3]:
        c.close()
    want = c0 + SEQS + 4 + 4  # sequences, not requests
    wait_for(lambda: finished(srv, "cancelled") >= want)
    time.sleep(0.3)
    tap(finished(srv, "cancelled") == want, "cancel: counted per sequence (n=2 counts 2)",
        f"{c0} -> {finished(srv, 'cancelled')}, want {want}")


def finished_once(srv):
    """A request that runs to its end is counted once too (by its owner, not again by
    the bridge)."""
    l0 = finished(srv, "length")
    c, st, _, _ = open_stream(srv, long_stream(max_tokens=4))
    data = b""
    c.settimeout(30)
    while b"[DONE]" not in data:
        got = c.recv(65536)
        if not got:
            break
        data += got
    c.close()
    time.sleep(0.2)
    tap(st == 200 and finished(srv, "length") == l0 + 1, "a finished stream counts once",
        f"{l0} -> {finished(srv, 'length')}")


def main():
    srv = burst_is_held_to_max_queue()
    counted_in_sequences(srv)
    finished_once(srv)
    rc = srv.stop()
    tap(rc == 0, "server exits 0", f"exit {rc}\n" + "".join(srv.log[-30:]))
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
