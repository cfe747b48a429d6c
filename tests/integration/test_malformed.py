#!/usr/bin/env python3
"""test_malformed.py - bad input never takes the server down.

Fires a corpus of malformed HTTP (truncated requests, oversized headers, bad
chunking, binary garbage, request smuggling shapes, a slowloris client) and
malformed JSON bodies (wrong types, huge numbers, deep nesting, invalid UTF-8) at a
running h2oserve. Each must get a 4xx answer or a closed connection, never a hang
or a crash, and /health must answer 200 after each. TAP output.
Usage: test_malformed.py H2OSERVE_BINARY
"""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Server, tap, results  # noqa: E402


def raw(port, data, wait=5.0, half_close=True):
    """Send bytes, read until the server closes or goes quiet; return the reply."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(wait)
    try:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    out = b""
    try:
        while True:
            got = s.recv(65536)
            if not got:
                break
            out += got
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return out


def status_of(reply):
    if not reply.startswith(b"HTTP/1."):
        return None
    try:
        return int(reply.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def post(body_bytes, extra=b""):
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: " + str(len(body_bytes)).encode() + b"\r\n\r\n" + body_bytes)


HTTP_CORPUS = [
    ("truncated request line", b"GET /hea"),
    ("truncated headers", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: b"),
    ("truncated body", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"a\":"),
    ("binary garbage", bytes(range(256)) * 4),
    ("NUL in request line", b"GET /he\x00alth HTTP/1.1\r\n\r\n"),
    ("bad method", b"FROB / HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ("HTTP/3.0 version", b"GET /health HTTP/3.0\r\nHost: x\r\n\r\n"),
    ("oversized header", b"GET /health HTTP/1.1\r\nX: " + b"a" * 100000 + b"\r\n\r\n"),
    ("too many headers", b"GET /health HTTP/1.1\r\n" + b"X-A: b\r\n" * 5000 + b"\r\n"),
    ("bad header name", b"GET /health HTTP/1.1\r\nBad Header: x\r\n\r\n"),
    ("bad chunk size", b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"),
    ("chunk size overflow", b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n"),
    ("chunk without CRLF", b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX0\r\n\r\n"),
    ("CL and TE together", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    ("two Content-Lengths", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"),
    ("negative Content-Length", b"POST /v1/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
    ("huge Content-Length", b"POST /v1/completions HTTP/1.1\r\nContent-Length: 999999999999999999999\r\n\r\n"),
    ("gzip transfer encoding", b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
    ("unknown Expect", b"POST /v1/completions HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}"),
    ("lone LF line endings", b"GET /health HTTP/1.1\nHost: x\n\n"),
]

JSON_CORPUS = [
    ("empty body", b""),
    ("not JSON", b"hello"),
    ("JSON array", b"[1,2,3]"),
    ("JSON string", b"\"prompt\""),
    ("prompt wrong type", json.dumps({"model": MODEL, "prompt": {"a": 1}}).encode()),
    ("max_tokens string", json.dumps({"model": MODEL, "prompt": "x", "max_tokens": "5"}).encode()),
    ("max_tokens huge", b'{"model":"' + MODEL.encode() + b'","prompt":"x","max_tokens":1e400}'),
    ("max_tokens 2^70", b'{"model":"' + MODEL.encode() + b'","prompt":"x","max_tokens":1180591620717411303424}'),
    ("temperature NaN-ish", b'{"model":"' + MODEL.encode() + b'","prompt":"x","temperature":-1e309}'),
    ("n negative", json.dumps({"model": MODEL, "prompt": "x", "n": -3}).encode()),
    ("deep nesting", b'{"model":"x","prompt":' + b"[" * 100000 + b"]" * 100000 + b"}"),
    ("deep object nesting", b'{"a":' * 50000 + b"1" + b"}" * 50000),
    ("invalid UTF-8 in prompt", b'{"model":"' + MODEL.encode() + b'","prompt":"\xff\xfe\xc3"}'),
    ("invalid UTF-8 in key", b'{"\xff":1,"model":"' + MODEL.encode() + b'","prompt":"x"}'),
    ("NUL escape in prompt", b'{"model":"' + MODEL.encode() + b'","prompt":"a\\u0000b"}'),
    ("lone surrogate escape", b'{"model":"' + MODEL.encode() + b'","prompt":"\\ud800"}'),
    ("token id out of range", json.dumps({"model": MODEL, "prompt": [99999999]}).encode()),
    ("empty token array", json.dumps({"model": MODEL, "prompt": []}).encode()),
    ("logit_bias bad key", json.dumps({"model": MODEL, "prompt": "x", "logit_bias": {"abc": 1}}).encode()),
    ("stop list too long", json.dumps({"model": MODEL, "prompt": "x", "stop": ["a"] * 9}).encode()),
    ("trailing garbage", b'{"model":"' + MODEL.encode() + b'","prompt":"x"} junk'),
    ("truncated JSON", b'{"model":"' + MODEL.encode() + b'","prompt":"x'),
    ("kv_cache bad policy", json.dumps({"model": MODEL, "prompt": "x", "kv_cache": {"policy": "lru"}}).encode()),
]


def main():
    srv = Server("--idle-timeout-s", "2")
    port = srv.port

    def healthy():
        return srv.get("/health")[0] == 200

    for name, data in HTTP_CORPUS:
        t0 = time.time()
        reply = raw(port, data)
        st = status_of(reply)
        ok = (st is None or 400 <= st < 600 and st != 500) and time.time() - t0 < 15
        tap(ok and healthy(), f"http: {name} -> {st or 'closed'}", reply[:200])

    for name, body in JSON_CORPUS:
        reply = raw(port, post(body), wait=30)
        st = status_of(reply)
        ok = st is not None and 400 <= st < 500
        if ok and b"\r\n\r\n" in reply:
            payload = reply.split(b"\r\n\r\n", 1)[1]
            try:
                err = json.loads(payload)["error"]
                ok = set(err) == {"message", "type", "param", "code"}
            except (ValueError, KeyError, TypeError):
                ok = False
        tap(ok and healthy(), f"json: {name} -> {st}", reply[:300])

    # Slowloris: a request trickled one byte every 0.1 s never completes; with a 2 s
    # idle timeout the server cuts it off after about 2 s however steadily it
    # trickles, and serves others meanwhile.
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(1)
    closed_after = None
    t0 = time.time()
    others_ok = True
    for b in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
        try:
            s.send(bytes([b]))
            s.recv(1, socket.MSG_DONTWAIT)
            closed_after = time.time() - t0  # EOF: recv returned b""
            break
        except BlockingIOError:
            pass
        except OSError:
            closed_after = time.time() - t0
            break
        others_ok = others_ok and healthy()
        time.sleep(0.1)
        if time.time() - t0 > 10:
            break
    s.close()
    tap(closed_after is not None and closed_after < 6 and others_ok and healthy(),
        "slowloris is cut off, others still served", closed_after)

    # Many connections opened and dropped at once, half of them mid-request.
    socks = []
    for i in range(200):
        c = socket.create_connection(("127.0.0.1", port))
        if i % 2:
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{")
        socks.append(c)
    for c in socks:
        c.close()
    tap(healthy(), "200 dropped connections, still healthy")

    tap(srv.stop() == 0, "server exits 0 after the corpus")
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
