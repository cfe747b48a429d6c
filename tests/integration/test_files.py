#!/usr/bin/env python3
"""test_files.py - the OpenAI Files API of the real h2oserve binary, over real HTTP.

Upload (multipart/form-data, built by hand here), retrieve, list with its cursor
pagination, download and delete; every way an upload can be wrong; ids that cannot
be ours; a filename that looks like a path; the size limit; and files surviving a
restart on the same --data-dir. After each bad request the server must still be
healthy. Run by on_pg.py, the same against the PostgreSQL job store. TAP output.
Usage: test_files.py H2OSERVE_BINARY
"""
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, healthy, read_until, results, tap  # noqa: E402

# Run by on_pg.py: the store is PostgreSQL, and the checks of the data dir's files
# become checks that nothing is on disk.
ON_PG = bool(os.environ.get("H2O_TEST_PG_HOST"))

LINES = b'{"custom_id":"r1","method":"POST","url":"/v1/completions","body":{}}\n'


def stop_ok(srv, name):
    rc = srv.stop()
    tap(rc == 0, name, f"exit {rc}\n" + "".join(srv.log[-20:]))


def multipart(fields, boundary=None):
    """Body and Content-Type for `fields`: (name, value bytes, filename or None)."""
    boundary = boundary or "h2oserveTest" + os.urandom(8).hex()
    out = b""
    for name, value, filename in fields:
        disp = f'form-data; name="{name}"'
        if filename is not None:
            # A quoted-string: backslash and quote go as quoted-pairs (RFC 9110).
            quoted = filename.replace("\\", "\\\\").replace('"', '\\"')
            disp += f'; filename="{quoted}"'
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n".encode()
        if filename is not None:
            out += b"Content-Type: application/octet-stream\r\n"
        out += b"\r\n" + value + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


def post_raw(srv, body, content_type, path="/v1/files"):
    headers = {"Content-Type": content_type} if content_type else {}
    c = srv.conn()
    c.putrequest("POST", path)
    for k, v in headers.items():
        c.putheader(k, v)
    c.putheader("Content-Length", str(len(body)))
    c.endheaders(body)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def upload(srv, content=LINES, filename="in.jsonl", purpose="batch"):
    fields = [("purpose", purpose.encode(), None), ("file", content, filename)]
    body, ct = multipart(fields)
    st, data = post_raw(srv, body, ct)
    return st, json.loads(data)


def getj(srv, path, method="GET"):
    st, data, _ = srv.request(method, path)
    try:
        return st, json.loads(data)
    except ValueError:
        return st, data


def error_of(body):
    e = body.get("error") if isinstance(body, dict) else None
    return e if isinstance(e, dict) and set(e) == {"message", "type", "param", "code"} else None


def bad_upload(srv, name, body, content_type, status, param=None, words=()):
    """Send a bad upload; check status, the OpenAI error body, and that the server
    stays healthy."""
    st, data = post_raw(srv, body, content_type)
    try:
        e = error_of(json.loads(data))
    except ValueError:
        e = None
    ok = (st == status and e is not None and e["type"] == "invalid_request_error"
          and (param is None or e["param"] == param)
          and all(w.lower() in e["message"].lower() for w in words))
    tap(ok and healthy(srv), name, (st, data[:300]))


def list_all(srv, query):
    st, r = getj(srv, "/v1/files" + query)
    return r["data"] if st == 200 else None


def walk(srv, order, limit, purpose="batch"):
    """Follow the pages; return (ids in order, every page's (first, last, has_more,
    ids) tuple)."""
    ids, pages, after = [], [], None
    for _ in range(100):
        q = f"?order={order}&limit={limit}&purpose={purpose}"
        if after:
            q += f"&after={after}"
        st, r = getj(srv, "/v1/files" + q)
        if st != 200:
            return None, [(st, r)]
        page = [f["id"] for f in r["data"]]
        pages.append((r["first_id"], r["last_id"], r["has_more"], page))
        ids += page
        if not r["has_more"]:
            break
        after = r["last_id"]
    return ids, pages


def main():
    srv = Server()

    # --- upload, retrieve, download, list: a round trip
    t0 = int(time.time())
    st, f = upload(srv, LINES, "requests.jsonl")
    ok = (st == 200 and f["id"].startswith("file-") and f["object"] == "file"
          and f["bytes"] == len(LINES) and f["filename"] == "requests.jsonl"
          and f["purpose"] == "batch" and f["status"] == "processed"
          and f["status_details"] is None and f["expires_at"] is None
          and abs(f["created_at"] - t0) <= 5)
    tap(ok, "upload returns the File object", f)
    fid = f["id"]
    st, g = getj(srv, f"/v1/files/{fid}")
    tap(st == 200 and g == f, "retrieve returns the same File object", g)
    st, data, r = srv.get(f"/v1/files/{fid}/content")
    tap(st == 200 and data == LINES
        and r.getheader("Content-Type") == "application/octet-stream",
        "content returns the bytes uploaded", (st, data[:200], r.getheaders()))
    st, data, r = srv.request("HEAD", f"/v1/files/{fid}/content")
    tap(st == 200 and data == b"" and r.getheader("Content-Length") == str(len(LINES))
        and healthy(srv), "HEAD content: the length, no body", (st, data[:100]))
    st, lst = getj(srv, "/v1/files")
    ok = (st == 200 and lst["object"] == "list" and [x["id"] for x in lst["data"]] == [fid]
          and lst["first_id"] == fid and lst["last_id"] == fid and lst["has_more"] is False)
    tap(ok, "list holds the upload", lst)

    # Every byte value, CRLFs and lines that look like the boundary: the file part's
    # bytes are stored exactly, and a 3 MiB body goes through the upload path whole.
    tricky = bytes(range(256)) + b"\r\n--h2oserveTest\r\n--\r\n\r\n" + os.urandom(3 << 20)
    st, f2 = upload(srv, tricky, "binary.jsonl")
    st2, data, _ = srv.get(f"/v1/files/{f2.get('id')}/content")
    tap(st == 200 and f2["bytes"] == len(tricky) and st2 == 200 and data == tricky,
        "3 MiB of arbitrary bytes round-trip exactly", (st, f2, st2, len(data)))
    st, f3 = upload(srv, LINES, "UPPER.JSONL")
    tap(st == 200 and f3["filename"] == "UPPER.JSONL", "the .jsonl suffix is case-insensitive", f3)

    # --- pagination: newest first by default, a cursor in both orders
    more = [upload(srv, LINES, f"p{i}.jsonl")[1]["id"] for i in range(5)]
    everything = [x["id"] for x in list_all(srv, "")]
    tap(len(everything) == 8 and everything[:5] == more[::-1] and everything[-1] == fid,
        "list is newest first by default", everything)
    tap([x["id"] for x in list_all(srv, "?order=asc")] == everything[::-1],
        "order=asc is oldest first", everything)
    ids, pages = walk(srv, "desc", 3)
    ok = (ids == everything and len(pages) == 3
          and all(p[2] for p in pages[:-1]) and not pages[-1][2]
          and all(p[0] == p[3][0] and p[1] == p[3][-1] for p in pages))
    tap(ok, "limit=3 pages in desc order: has_more, first_id, last_id", pages)
    ids, pages = walk(srv, "asc", 2)
    tap(ids == everything[::-1] and len(pages) == 4 and not pages[-1][2],
        "limit=2 pages in asc order", pages)
    st, r = getj(srv, "/v1/files?limit=8")
    tap(st == 200 and len(r["data"]) == 8 and r["has_more"] is False,
        "a page that ends exactly at the last file has no more", r)
    st, r = getj(srv, f"/v1/files?after={everything[-1]}")
    tap(st == 200 and r["data"] == [] and r["first_id"] is None and r["last_id"] is None
        and r["has_more"] is False, "after the last file: an empty page with null ids", r)
    for q, what in (("limit=0", "limit 0"), ("limit=10001", "limit over 10000"),
                    ("limit=x", "limit not a number"), ("order=up", "bad order"),
                    ("after=file-000000000000000000000000", "after an unknown id"),
                    ("after=..%2Fh2oserve.db", "after an id that cannot be ours")):
        st, r = getj(srv, "/v1/files?" + q)
        tap(st == 400 and error_of(r) is not None and healthy(srv), f"list with {what}: 400",
            (st, r))

    # --- the purpose filter
    st, r = getj(srv, "/v1/files?purpose=batch")
    tap(st == 200 and [x["id"] for x in r["data"]] == everything, "purpose=batch lists them", r)
    for p in ("batch_output", "fine-tune"):
        st, r = getj(srv, f"/v1/files?purpose={p}")
        tap(st == 200 and r["data"] == [] and r["first_id"] is None and r["last_id"] is None
            and r["has_more"] is False, f"purpose={p}: an empty list", r)

    # --- delete
    victim = more[2]
    st, r = getj(srv, f"/v1/files/{victim}", "DELETE")
    tap(st == 200 and r == {"id": victim, "object": "file", "deleted": True}, "delete", r)
    for what, method, path in (("retrieve", "GET", f"/v1/files/{victim}"),
                               ("content", "GET", f"/v1/files/{victim}/content"),
                               ("delete", "DELETE", f"/v1/files/{victim}")):
        st, r = getj(srv, path, method)
        e = error_of(r)
        tap(st == 404 and e and e["type"] == "invalid_request_error" and victim in e["message"],
            f"{what} after delete: 404 with an OpenAI error", (st, r))
    tap(victim not in [x["id"] for x in list_all(srv, "")], "deleted file leaves the list")

    # --- bad uploads: each a 400 with a clear message, and the server carries on
    b = "h2oserveBad"
    body, ct = multipart([("purpose", b"fine-tune", None), ("file", LINES, "a.jsonl")], b)
    bad_upload(srv, "wrong purpose: 400 naming 'batch'", body, ct, 400, "purpose", ["'batch'"])
    body, ct = multipart([("purpose", b"batch", None), ("file", LINES, "a.json")], b)
    bad_upload(srv, "a name not ending in .jsonl: 400", body, ct, 400, "file", [".jsonl"])
    body, ct = multipart([("purpose", b"batch", None), ("file", b"", "a.jsonl")], b)
    bad_upload(srv, "an empty file: 400", body, ct, 400, "file", ["empty"])
    body, ct = multipart([("purpose", b"batch", None)], b)
    bad_upload(srv, "no file field: 400", body, ct, 400, "file", ["file"])
    body, ct = multipart([("file", LINES, "a.jsonl")], b)
    bad_upload(srv, "no purpose field: 400", body, ct, 400, "purpose", ["purpose"])
    body, ct = multipart([("purpose", b"batch", None), ("file", LINES, None)], b)
    bad_upload(srv, "a file field without a filename: 400", body, ct, 400, "file",
               ["filename"])
    body, ct = multipart([("purpose", b"batch", None), ("file", LINES, "a.jsonl"),
                          ("file", LINES, "b.jsonl")], b)
    bad_upload(srv, "two file fields: 400", body, ct, 400, "file", ["more than once"])
    body, ct = multipart([("purpose", b"batch", None), ("purpose", b"batch", None),
                          ("file", LINES, "a.jsonl")], b)
    bad_upload(srv, "two purpose fields: 400", body, ct, 400, "purpose", ["more than once"])
    body, ct = multipart([("purpose", b"batch", None), ("file", LINES, "a.jsonl"),
                          ("expires_after[anchor]", b"created_at", None)], b)
    bad_upload(srv, "expires_after (files never expire here): 400", body, ct, 400,
               "expires_after", ["expire"])
    bad_upload(srv, "a JSON body: 400 asking for multipart", b'{"purpose":"batch"}',
               "application/json", 400, None, ["multipart/form-data"])
    bad_upload(srv, "no Content-Type: 400", b"purpose=batch", None, 400, None, ["multipart"])
    bad_upload(srv, "multipart without a boundary: 400", b"x", "multipart/form-data", 400,
               None, ["boundary"])
    body, ct = multipart([("purpose", b"batch", None), ("file", LINES * 4, "a.jsonl")], b)
    bad_upload(srv, "a truncated multipart body: 400", body[:len(body) - 40], ct, 400, None,
               ["multipart"])
    bad_upload(srv, "a body that is not multipart at all: 400", b"just some bytes\r\n", ct,
               400, None, ["multipart"])
    bad_upload(srv, "a filename that is not UTF-8: 400",
               multipart([("purpose", b"batch", None), ("file", LINES, "x")], b)[0]
               .replace(b'filename="x"', b'filename="\xff\xfe.jsonl"'), ct, 400, "file",
               ["utf-8"])
    st, r = getj(srv, "/v1/files")
    tap(st == 200 and len(r["data"]) == 7, "no bad upload left a file behind", r)

    # --- ids and routes
    for path, what in (("/v1/files/file-abc.def", "an id with a dot"),
                       ("/v1/files/..%2Fh2oserve.db", "an id with percent-encoded ../"),
                       ("/v1/files/" + "a" * 60, "an id too long for the store"),
                       ("/v1/files/file%00x/content", "an id with an encoded NUL"),
                       ("/v1/files/file-000000000000000000000000", "a well-formed unknown id")):
        st, r = getj(srv, path)
        tap(st == 404 and error_of(r) is not None and healthy(srv), f"{what}: 404", (st, r))
    for path in ("/v1/files/", f"/v1/files/{fid}/", f"/v1/files/{fid}/contents",
                 f"/v1/files/{fid}/content/x", "/v1/files/a/b/c"):
        st, r = getj(srv, path)
        tap(st == 404 and error_of(r) is not None, f"no route for {path}: 404", (st, r))
    for method, path in (("PUT", "/v1/files"), ("DELETE", "/v1/files"),
                         ("POST", f"/v1/files/{fid}"), ("PATCH", f"/v1/files/{fid}"),
                         ("DELETE", f"/v1/files/{fid}/content"),
                         ("POST", f"/v1/files/{fid}/content")):
        st, r = getj(srv, path, method)
        tap(st == 405 and error_of(r) is not None and healthy(srv), f"{method} {path}: 405",
            (st, r))
    st, g = getj(srv, f"/v1/files/{fid}")
    tap(st == 200 and g == f, "the first file is untouched by all of that", g)

    # --- downloads stream from disk as the client reads: any size, any reader speed
    big = os.urandom(12 << 20)
    st, fb = upload(srv, big, "big.jsonl")
    st2, data, _ = srv.get(f"/v1/files/{fb.get('id')}/content")
    tap(st == 200 and st2 == 200 and data == big and healthy(srv),
        "a 12 MiB download (more than --write-queue-max-bytes) is whole", (st, st2, len(data)))
    stop_ok(srv, "server exits 0")

    srv = Server("--write-queue-max-bytes", "64K")
    st, fb = upload(srv, big, "big.jsonl")
    fid_big = fb.get("id")
    s = socket.create_connection(("127.0.0.1", srv.port))
    # Two downloads pipelined on one connection, read slowly: both whole, in order.
    req = f"GET /v1/files/{fid_big}/content HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    s.sendall(req + req)
    got = b""
    want_len = 2 * len(big)
    deadline = time.time() + 120
    while time.time() < deadline:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
        time.sleep(0.002)  # a reader slower than the disk
        if got.count(b"HTTP/1.1 200") == 2 and len(got) >= want_len + 2 * 100:
            bodies = got.split(b"HTTP/1.1 200")[1:]
            if all(len(x.partition(b"\r\n\r\n")[2]) >= len(big) for x in bodies):
                break
    s.close()
    parts = [x.partition(b"\r\n\r\n")[2] for x in got.split(b"HTTP/1.1 200 OK\r\n")[1:]]
    tap(len(parts) == 2 and parts[0] == big and parts[1] == big and healthy(srv),
        "two pipelined 12 MiB downloads to a slow reader with a 64 KiB write queue are whole",
        [len(p) for p in parts])
    # A client that stops reading a download is closed after the idle timeout (the
    # download never passes the write-queue limit, so only the timeout can tell).
    srv2 = Server("--write-queue-max-bytes", "64K", "--idle-timeout-s", "1")
    st, fb2 = upload(srv2, big, "big.jsonl")
    s = socket.create_connection(("127.0.0.1", srv2.port))
    s.sendall(f"GET /v1/files/{fb2['id']}/content HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    time.sleep(3)  # read nothing
    s.settimeout(10)
    got, eof = 0, False
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                eof = True
                break
            got += len(chunk)
    except (socket.timeout, ConnectionResetError):
        eof = True
    s.close()
    tap(eof and got < len(big) and healthy(srv2),
        "a stalled download is closed after --idle-timeout-s", got)
    stop_ok(srv2, "stalled-download server exits 0")
    stop_ok(srv, "small-queue server exits 0")

    # A download pipelined behind a response that closes the connection (the server
    # started draining) is never sent: no body without its head after the close.
    srv = Server("--model", "dummy:opt-125m")
    small = b"x" * (1 << 20)
    st, fs = upload(srv, small, "small.jsonl")
    body = json.dumps({"model": "dummy:opt-125m", "prompt": "a", "max_tokens": 300,
                       "ignore_eos": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body +
              f"GET /v1/files/{fs['id']}/content HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    time.sleep(0.5)
    srv.proc.send_signal(signal.SIGTERM)
    data = read_until(s, lambda d: False, 60)
    s.close()
    head = data.partition(b"\r\n\r\n")[0].lower()
    tap(data.startswith(b"HTTP/1.1 200") and b"connection: close" in head
        and data.count(b"HTTP/1.1 ") == 1 and b"xxxxxxxx" not in data,
        "nothing follows a Connection: close response, not even a pipelined download",
        data[:200] + b"..." + data[-100:])
    srv.proc.wait(timeout=30)

    # --- a filename that looks like a path is a name, not a path
    root = tempfile.mkdtemp(prefix="h2oserve-files-")
    data_dir = os.path.join(root, "data")
    srv = Server(data_dir=data_dir)
    names = ["../../escape.jsonl", "/tmp/h2oserve-abs-escape.jsonl", "a/b\\c/../d.jsonl",
             "..", "x/../../../../escape2.jsonl", 'q"uote\\".jsonl']
    got = []
    for name in names:
        st, r = upload(srv, LINES, name)
        got.append((st, r.get("filename") if st == 200 else r))
    stored = [n for n in names if n.endswith(".jsonl")]
    tap([g for g in got if g[0] == 200] == [(200, n) for n in stored],
        "path-like filenames are stored verbatim", got)
    st, r = getj(srv, "/v1/files?order=asc")
    tap(st == 200 and [x["filename"] for x in r["data"]] == stored,
        "and listed verbatim", r)
    outside = []
    for dirpath, _, files in os.walk(root):
        for fn in files:
            p = os.path.join(dirpath, fn)
            if not p.startswith(data_dir + os.sep) or "escape" in fn:
                outside.append(p)
    if ON_PG:  # bodies are rows: nothing of them on disk at all
        under_files = os.listdir(data_dir) if os.path.isdir(data_dir) else []
        tap(not outside and not os.path.exists("/tmp/h2oserve-abs-escape.jsonl")
            and "files" not in under_files, "nothing written to disk (PostgreSQL keeps "
            "the bodies)", (outside, under_files))
    else:
        under_files = os.listdir(os.path.join(data_dir, "files"))
        tap(not outside and not os.path.exists("/tmp/h2oserve-abs-escape.jsonl")
            and all(n.startswith("file-") for n in under_files) and len(under_files) == 5,
            "nothing written outside the data dir; bodies named by id", (outside, under_files))
    stop_ok(srv, "path-name server exits 0")

    # --- files survive a restart on the same data dir
    srv = Server(data_dir=data_dir)
    st, r = getj(srv, "/v1/files?order=asc")
    ok = st == 200 and [x["filename"] for x in r["data"]] == stored
    first = r["data"][0]["id"] if ok else None
    st2, data, _ = srv.get(f"/v1/files/{first}/content")
    tap(ok and st2 == 200 and data == LINES, "files and bodies survive a restart", (r, st2))
    st, r = getj(srv, f"/v1/files/{first}", "DELETE")
    tap(st == 200 and r["deleted"] is True, "delete after the restart", r)
    stop_ok(srv, "restarted server exits 0")
    srv = Server(data_dir=data_dir)
    st, r = getj(srv, f"/v1/files/{first}")
    st_list, listed = getj(srv, "/v1/files")
    left = (len(listed["data"]) if st_list == 200 else -1) if ON_PG else \
        len(os.listdir(os.path.join(data_dir, "files")))
    tap(st == 404 and left == 4, "a delete is durable too", (st, r, left))
    stop_ok(srv, "third server exits 0")
    shutil.rmtree(root, ignore_errors=True)

    # --- the size limit: --max-file-bytes 2K
    srv = Server("--max-file-bytes", "2K")
    st, r = upload(srv, b"x" * 2047 + b"\n")
    tap(st == 200 and r["bytes"] == 2048, "a file of exactly --max-file-bytes is accepted", r)
    body, ct = multipart([("purpose", b"batch", None), ("file", b"x" * 2049, "a.jsonl")])
    st, data = post_raw(srv, body, ct)
    e = error_of(json.loads(data)) if data.startswith(b"{") else None
    tap(st == 413 and e and "2048" in e["message"] and e["param"] == "file" and healthy(srv),
        "one byte over: 413 naming the limit", (st, data))
    body, ct = multipart([("purpose", b"batch", None), ("file", b"x" * 200000, "a.jsonl")])
    st, data = post_raw(srv, body, ct)
    tap(st == 413 and healthy(srv), "200 kB against a 2 KiB limit: 413", (st, data))
    # Far over the limit: past what the HTTP layer buffers for this route (the larger
    # of --max-file-bytes + 64 KiB and --max-body-bytes, 32 MiB by default) it answers
    # from Content-Length alone, before any of the body is sent, and closes.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: " + ct.encode()
              + b"\r\nContent-Length: 100000000\r\n\r\n")
    resp = read_until(s, lambda d: b"\r\n\r\n" in d, 10)
    s.close()
    tap(resp.startswith(b"HTTP/1.1 413") and healthy(srv),
        "a body far over the limit: 413 before it is sent", resp[:200])
    st, r = getj(srv, "/v1/files")
    tap(st == 200 and len(r["data"]) == 1, "only the accepted file is stored", r)
    stop_ok(srv, "small-limit server exits 0")

    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
