#!/usr/bin/env python3
"""test_upload_stream.py - POST /v1/files streams its body into the job store, over
real HTTP against the real binary (issue 22: uploads never whole in memory).

- A large upload (300 MB of JSONL by default, H2O_TEST_UPLOAD_MB to change it),
  generated and hashed as it is sent, never held by the test either: the server's
  peak RSS (VmHWM in /proc/PID/status) grows by far less than the file, and the
  download hashes the same.
- The HTTP layer's streamed body: chunked uploads, a chunked body that grows past
  the limit (413 mid-stream), Expect: 100-continue (a 100, or the final status
  instead when the head alone is refused), a request pipelined behind an upload,
  an upload refused at its head whose body is still read so the connection goes on.
- Nothing of an upload stays in the store when the client leaves mid-body, when the
  connection times out, or when the server drains mid-body.
Run by on_pg.py too, every store then in PostgreSQL. TAP output.
Usage: test_upload_stream.py H2OSERVE_BINARY
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server  # noqa: E402
from test_server import healthy, read_until, results, tap  # noqa: E402

ON_PG = bool(os.environ.get("H2O_TEST_PG_HOST"))
B = "h2oserveStream0123456789"
CT = f"multipart/form-data; boundary={B}"
# A sanitizer build keeps freed blocks in a quarantine (256 MB by default), which
# would count as the server's memory; a small one keeps what is measured the
# server's own.
os.environ["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=8"
                              ":thread_local_quarantine_size_kb=64").lstrip(":")


def head(length=None, extra="", path="/v1/files", ct=CT):
    framing = (f"Content-Length: {length}\r\n" if length is not None
               else "Transfer-Encoding: chunked\r\n")
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ct}\r\n{framing}{extra}"
            "\r\n").encode()


def form(content, filename="in.jsonl", purpose=b"batch"):
    """The whole multipart body for a small file."""
    return (f"--{B}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n".encode()
            + purpose + f"\r\n--{B}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n".encode()
            + content + f"\r\n--{B}--\r\n".encode())


def chunked(body, piece=1000):
    out = b""
    for i in range(0, len(body), piece):
        part = body[i:i + piece]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


def responses(data):
    """Split raw bytes into (status, headers lower-cased, body) for Content-Length
    responses; 1xx heads come out with an empty body."""
    out = []
    while data:
        h, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = h.decode("latin-1").split("\r\n")
        hdrs = {k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:])}
        n = int(hdrs.get("content-length", "0"))
        if len(rest) < n:
            break
        out.append((int(lines[0].split()[1]), hdrs, rest[:n]))
        data = rest[n:]
    return out


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def stored(srv):
    """(files listed, bodies held by the store: entries of files/ with temporary
    uploads, or distinct files in h2o_file_chunks)."""
    st, data, _ = srv.get("/v1/files")
    listed = len(json.loads(data)["data"]) if st == 200 else -1
    return listed, bodies(srv.data_dir)


def bodies(data_dir):
    if not ON_PG:
        d = os.path.join(data_dir, "files")
        return len(os.listdir(d)) if os.path.isdir(d) else 0
    psql = os.path.join(os.environ["H2O_TEST_PG_BINDIR"], "psql")
    r = subprocess.run([psql, "-X", "-A", "-t", "-c",
                        "SELECT count(DISTINCT file_id) FROM h2o_file_chunks",
                        test_server._PG_DBS[data_dir]], capture_output=True, text=True)
    return int(r.stdout.strip()) if r.returncode == 0 else -1


def eventually(pred, limit=10):
    end = time.time() + limit
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


# ---- the large upload ----

BLOCK_LINES = 4096
LINE = (b'{"custom_id":"r","method":"POST","url":"/v1/completions","body":'
        b'{"model":"m","prompt":"the quick brown fox jumps over the lazy dog","max_tokens":8}}\n')


def block(i):
    """Block i of the file: a line naming it, then BLOCK_LINES fixed lines (so the
    size is known up front and every block differs)."""
    return b'{"custom_id":"block-%010d"}\n' % i + LINE * BLOCK_LINES


def big_upload(srv, mb):
    n_blocks = max(1, (mb << 20) // len(block(0)))
    file_len = n_blocks * len(block(0))
    pre = (f"--{B}\r\nContent-Disposition: form-data; name=\"file\"; "
           f"filename=\"big.jsonl\"\r\n\r\n").encode()
    post = (f"\r\n--{B}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
            f"batch\r\n--{B}--\r\n").encode()
    sha = hashlib.sha256()
    before = vm_hwm_kib(srv.proc.pid)
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(head(len(pre) + file_len + len(post)) + pre)
    for i in range(n_blocks):
        b = block(i)
        sha.update(b)
        s.sendall(b)
    s.sendall(post)
    got = read_until(s, lambda d: b"\r\n\r\n" in d and d.endswith(b"}"), 300)
    s.close()
    t_up = time.time() - t0
    after = vm_hwm_kib(srv.proc.pid)
    r = responses(got)
    f = json.loads(r[0][2]) if r and r[0][0] == 200 else {}
    tap(f.get("bytes") == file_len and f.get("filename") == "big.jsonl",
        f"a {file_len >> 20} MiB upload (the file part first, the purpose after it) is "
        f"stored ({t_up:.1f} s)", got[:300])
    grew = (after - before) / 1024
    tap(before > 0 and grew < 64,
        f"the server's peak RSS grew by {grew:.1f} MiB for it (VmHWM {before >> 10} -> "
        f"{after >> 10} MiB), far less than the file", (before, after))
    # The download, hashed as it arrives.
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(f"GET /v1/files/{f.get('id')}/content HTTP/1.1\r\nHost: x\r\n"
              "Connection: close\r\n\r\n".encode())
    s.settimeout(120)
    buf, down, n = b"", hashlib.sha256(), 0
    while b"\r\n\r\n" not in buf:
        c = s.recv(1 << 16)
        if not c:
            break
        buf += c
    h, _, rest = buf.partition(b"\r\n\r\n")
    down.update(rest)
    n += len(rest)
    while True:
        c = s.recv(1 << 20)
        if not c:
            break
        down.update(c)
        n += len(c)
    s.close()
    tap(h.startswith(b"HTTP/1.1 200") and n == file_len
        and down.hexdigest() == sha.hexdigest(),
        f"the download hashes as the upload did ({time.time() - t0:.1f} s)", (h[:200], n))
    peak = vm_hwm_kib(srv.proc.pid)
    tap((peak - before) / 1024 < 64, "and the download did not grow the peak either",
        (before, peak))
    st, r, _ = srv.request("DELETE", f"/v1/files/{f.get('id')}")
    tap(st == 200 and stored(srv) == (0, 0), "deleted: nothing left", (st, stored(srv)))


# ---- the streamed body in the HTTP layer ----

def http_cases(srv):
    lines = b'{"custom_id":"a"}\n' * 5000
    # Chunked, in pieces that cut the multipart delimiters anywhere.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(head() + chunked(form(lines), 777))
    r = responses(read_until(s, lambda d: d.endswith(b"}"), 30))
    s.close()
    f = json.loads(r[0][2]) if r and r[0][0] == 200 else {}
    st, data, _ = srv.get(f"/v1/files/{f.get('id')}/content")
    tap(f.get("bytes") == len(lines) and data == lines, "a chunked upload is stored exactly",
        r[:1])
    srv.request("DELETE", f"/v1/files/{f.get('id')}")

    # A request pipelined behind an upload: answered after it, on the same connection.
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = form(lines)
    s.sendall(head(len(body)) + body + b"GET /v1/files HTTP/1.1\r\nHost: x\r\n\r\n")
    r = responses(read_until(s, lambda d: len(responses(d)) >= 2, 30))
    s.close()
    ok = len(r) == 2 and r[0][0] == 200 and r[1][0] == 200
    fid = json.loads(r[0][2])["id"] if ok else None
    tap(ok and r[0][1].get("connection") == "keep-alive"
        and [x["id"] for x in json.loads(r[1][2])["data"]] == [fid],
        "a request pipelined behind an upload is answered after it, keep-alive", r)
    srv.request("DELETE", f"/v1/files/{fid}")

    # Refused at the head (not multipart), no Expect: answered before the body is
    # read, which is then read and dropped, and the next request is served.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(head(len(body), ct="application/json") + body
              + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    r = responses(read_until(s, lambda d: len(responses(d)) >= 2, 30))
    s.close()
    tap(len(r) == 2 and r[0][0] == 400 and b"multipart/form-data" in r[0][2]
        and r[1][0] == 200, "refused at its head: 400, the body skipped, the next request "
        "served", r)

    # Expect: 100-continue, accepted: the 100, then the body, then the File.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(head(len(body), "Expect: 100-continue\r\n"))
    cont = read_until(s, lambda d: b"\r\n\r\n" in d, 10)
    s.sendall(body)
    r = responses(read_until(s, lambda d: d.endswith(b"}"), 30))
    s.close()
    tap(cont == b"HTTP/1.1 100 Continue\r\n\r\n" and r[-1][0] == 200,
        "Expect: 100-continue: the 100 comes before the body is sent", (cont, r[-1:]))
    srv.request("DELETE", f"/v1/files/{json.loads(r[-1][2])['id']}" if r[-1][0] == 200 else "")
    # Refused at the head with Expect: the final status instead of the 100, and the
    # connection closes (the client need never send the body).
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(head(len(body), "Expect: 100-continue\r\n", ct="text/plain"))
    got = read_until(s, lambda d: False, 10)
    s.close()
    r = responses(got)
    tap(len(r) == 1 and r[0][0] == 400 and r[0][1].get("connection") == "close"
        and b"100 Continue" not in got, "Expect: 100-continue refused at the head: the 400 "
        "instead of the 100, then the connection closes", got[:300])

    # A chunked body past the limit (--max-file-bytes 256K, + 64K of framing): the
    # chunk whose size would pass it is refused before its bytes, 413 mid-stream,
    # closing, and the file already in the store (200 KiB, within its own limit, with
    # a large field after it) goes. The refused chunk's size line is the last thing
    # sent, so the server has read everything when it closes (unread bytes would
    # reset the connection).
    limit = (256 + 64) << 10
    big = (form(b"x" * (200 << 10)).rpartition(f"--{B}--".encode())[0]
           + f"--{B}\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n".encode()
           + b"y" * (200 << 10))
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(head())
    for i in range(0, limit, 4096):
        s.sendall(b"1000\r\n" + big[i:i + 4096] + b"\r\n")
    time.sleep(0.3)
    mid = bodies(srv.data_dir)
    s.sendall(b"1000\r\n")
    got = read_until(s, lambda d: False, 10)
    s.close()
    r = responses(got)
    tap(len(r) == 1 and r[0][0] == 413 and r[0][1].get("connection") == "close"
        and (ON_PG or mid == 1) and stored(srv) == (0, 0),
        "a chunked body growing past the limit: 413 mid-stream, nothing stored",
        (got[:200], mid, stored(srv)))
    tap(healthy(srv), "healthy after the HTTP cases")


def cut_short(srv, name, leave):
    """Send half a valid 4 MiB upload, then leave(socket); nothing may stay."""
    body = form(b'{"custom_id":"x"}\n' * (4 << 16))
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(head(len(body)) + body[:len(body) // 2])
    time.sleep(0.3)
    mid = bodies(srv.data_dir)
    leave(s)
    ok = eventually(lambda: bodies(srv.data_dir) == 0)
    tap(ok and (ON_PG or mid == 1) and stored(srv) == (0, 0),
        f"{name}: nothing of the upload stays", (mid, stored(srv)))


SERVERS = []


def Server(*args, **kw):
    """test_server.Server, remembered so that a test that fails midway leaves no
    server running (main's finally kills what is left)."""
    srv = test_server.Server(*args, **kw)
    SERVERS.append(srv)
    return srv


def main():
    try:
        return run()
    finally:
        for srv in SERVERS:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()
                if srv.own_dir:
                    shutil.rmtree(srv.data_dir, ignore_errors=True)


def run():
    mb = int(os.environ.get("H2O_TEST_UPLOAD_MB", "300"))
    srv = Server("--max-file-bytes", f"{mb + 16}M", "--max-body-bytes", "1M")
    big_upload(srv, mb)
    tap(srv.stop() == 0, "server exits 0")

    srv = Server("--max-file-bytes", "256K", "--max-body-bytes", "64K")
    http_cases(srv)
    # The client leaves mid-body.
    srv2 = Server("--max-file-bytes", "64M")
    cut_short(srv2, "the client leaves mid-body", lambda s: s.close())
    tap(srv2.stop() == 0, "server exits 0")
    tap(srv.stop() == 0, "server exits 0")

    # The connection times out mid-body (the whole request within --idle-timeout-s).
    srv = Server("--max-file-bytes", "64M", "--idle-timeout-s", "1")
    cut_short(srv, "a stalled upload is closed after --idle-timeout-s",
              lambda s: (time.sleep(3), s.close()))
    tap(srv.stop() == 0, "server exits 0")

    # The server drains mid-body: the upload is in flight for the grace period, then
    # the connection closes and the upload is aborted before the store closes.
    srv = Server("--max-file-bytes", "64M", "--shutdown-grace-s", "1")
    body = form(b'{"custom_id":"x"}\n' * (4 << 16))
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(head(len(body)) + body[:len(body) // 2])
    time.sleep(0.3)
    mid = bodies(srv.data_dir)
    t0 = time.time()
    srv.proc.send_signal(signal.SIGTERM)
    rc = srv.proc.wait(timeout=30)
    s.close()
    tap(rc == 0 and time.time() - t0 < 10 and (ON_PG or mid == 1)
        and bodies(srv.data_dir) == 0, "a drain mid-body: exit 0 after the grace period, "
        "nothing of the upload left", (rc, mid, bodies(srv.data_dir)))
    shutil.rmtree(srv.data_dir, ignore_errors=True)

    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
