#!/usr/bin/env python3
"""test_batch_input.py - hostile JSON through every way in: a Batch input file over the
Batches API and through `h2oserve run-batch` (the same lines, the same codes),
POST /v1/batches bodies and their metadata, and /v1/completions bodies. Each way in
parses with the one checked parser (server/json.c json_parse_checked): strings must
be UTF-8 and hold no U+0000, nothing may follow the object. What comes back (the
batch object, its error list, the listing, output lines) is always valid UTF-8.

TAP output. Usage: test_batch_input.py H2OSERVE_BINARY
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import BIN, MODEL, Server, healthy, tap, results  # noqa: E402
import batchlib as bl  # noqa: E402

# (line, the code both ways in give it, its param in the batch's error list)
HOSTILE = [
    (bl.raw_line(b'"ok1"'), None, None),
    (bl.raw_line(b'"bad\xff"'), "invalid_custom_id", "custom_id"),      # raw invalid UTF-8
    (bl.raw_line(b'"\xc0\xaf"'), "invalid_custom_id", "custom_id"),     # overlong '/'
    (bl.raw_line(b'"\xed\xa0\x80"'), "invalid_custom_id", "custom_id"), # a UTF-8 surrogate
    (bl.raw_line(b'"x\\u0000y"'), "invalid_custom_id", "custom_id"),    # was answered as "x"
    (bl.raw_line(b'"d\\u0000a"'), "invalid_custom_id", "custom_id"),    # these two were
    (bl.raw_line(b'"d\\u0000b"'), "invalid_custom_id", "custom_id"),    # "duplicates"
    (bl.raw_line(b'"p1"', prompt=b'"a\\u0000b"'), "invalid_body", "body.prompt"),  # was cut
    (bl.raw_line(b'"p2"', prompt=b'["ok","\xff"]'), "invalid_body", "body.prompt[1]"),
    (bl.raw_line(b'"\\ud800"'), "invalid_json", None),                  # unpaired surrogate
    (bl.raw_line(b'"t1"', tail=b' trailing'), "invalid_json", None),     # garbage after it
    (bl.raw_line(b'"t2"', tail=b'\x01'), "invalid_json", None),          # a control byte
    (bl.raw_line(b'"ok2"'), None, None),
]


def hostile_file():
    return b"\n".join(l for l, _, _ in HOSTILE) + b"\n"


def batches_api(srv):
    st, f = bl.upload(srv, hostile_file())
    tap(st == 200, "upload the hostile file", f)
    st, b = bl.create(srv, f["id"])
    b = bl.wait(srv, b["id"])
    st, raw, _ = srv.get(f"/v1/batches/{b['id']}")
    tap(st == 200 and bl.utf8(raw), "the failed batch object is valid UTF-8", raw[:300])
    errs = (b.get("errors") or {}).get("data", [])
    got = [(e["line"], e["code"], e["param"]) for e in errs]
    want = [(i + 1, code, param) for i, (_, code, param) in enumerate(HOSTILE) if code]
    tap(b["status"] == "failed" and got == want and b["output_file_id"] is None
        and b["in_progress_at"] is None,
        "every hostile line is refused, with its code and member", got)
    nul = next((e for e in errs if e["line"] == 5), {"message": ""})
    tap("U+0000" in nul["message"] and "custom_id" in nul["message"],
        "a NUL in custom_id is named in the message", nul)

    # One line alone: before, its output file held the raw byte (invalid UTF-8).
    good = bl.request_line("fine", MODEL, "x")
    for name, line in (("invalid UTF-8", bl.raw_line(b'"bad\xff"')),
                       ("a NUL", bl.raw_line(b'"x\\u0000y"'))):
        st, f = bl.upload(srv, good.encode() + b"\n" + line + b"\n")
        b = bl.wait(srv, bl.create(srv, f["id"])[1]["id"])
        errs = (b.get("errors") or {}).get("data", [])
        tap(b["status"] == "failed" and [(e["line"], e["code"]) for e in errs]
            == [(2, "invalid_custom_id")] and b["output_file_id"] is None,
            f"a custom_id with {name} fails validation instead of running", b)
    # A prompt with a NUL used to run as its prefix.
    st, f = bl.upload(srv, bl.raw_line(b'"p"', prompt=b'"Hello\\u0000 world"') + b"\n")
    b = bl.wait(srv, bl.create(srv, f["id"])[1]["id"])
    errs = (b.get("errors") or {}).get("data", [])
    tap(b["status"] == "failed" and [(e["code"], e["param"]) for e in errs]
        == [("invalid_body", "body.prompt")], "a prompt with a NUL is refused, not cut", b)


def create_bodies(srv):
    st, f = bl.upload(srv, bl.jsonl([bl.request_line("x", MODEL, "x")]))
    fid = f["id"].encode()
    head = (b'{"input_file_id":"' + fid + b'","endpoint":"/v1/completions",'
            b'"completion_window":"24h"')
    cases = [
        ("metadata value not UTF-8", head + b',"metadata":{"k":"v\xff"}}', "metadata.k"),
        ("metadata key not UTF-8", head + b',"metadata":{"k\xc0\xaf":"v"}}', "metadata"),
        ("metadata value with NUL", head + b',"metadata":{"k":"v\\u0000w"}}', "metadata.k"),
        ("metadata key with NUL", head + b',"metadata":{"k\\u0000":"v"}}', "metadata"),
        ("input_file_id with NUL", b'{"input_file_id":"' + fid + b'\\u0000x",'
         b'"endpoint":"/v1/completions","completion_window":"24h"}', "input_file_id"),
        ("trailing garbage", head + b'} {"x":1}', None),
        ("a control byte after it", head + b'}\x01', None),
        ("65-character metadata key", head + b',"metadata":{"' + "é".encode() * 65
         + b'":"v"}}', "metadata"),
        ("513-character metadata value", head + b',"metadata":{"k":"' + "é".encode() * 513
         + b'"}}', "metadata"),
    ]
    for name, body, param in cases:
        st, raw, _ = srv.post("/v1/batches", body)
        err = (json.loads(raw).get("error") or {}) if bl.utf8(raw) and st != 200 else {}
        tap(st == 400 and err.get("param") == param and err.get("message"),
            f"create with {name} is 400 (param {param})", raw[:300])
    # OpenAI's limits count characters: 64 two-byte ones are a valid key, 512 a value.
    st, raw, _ = srv.post("/v1/batches", head + b',"metadata":{"' + "é".encode() * 64
                          + b'":"' + "é".encode() * 512 + b'"}}')
    tap(st == 200 and json.loads(raw)["metadata"] == {"é" * 64: "é" * 512},
        "metadata limits count characters, not bytes", raw[:200])
    if st == 200:
        bl.wait(srv, json.loads(raw)["id"])
    st, raw, _ = srv.get("/v1/batches?limit=100")
    ok = st == 200 and bl.utf8(raw)
    tap(ok and json.loads(raw)["object"] == "list", "GET /v1/batches stays valid UTF-8",
        raw[:300])
    return json.loads(raw.decode("utf-8", "replace"))["data"][0]["id"]


def completions_bodies(srv):
    base = b'{"model":"' + MODEL.encode() + b'","max_tokens":2,"prompt":'
    for name, body, param in (("a NUL in the prompt", base + b'"a\\u0000b"}', "prompt"),
                              ("a NUL in a stop string", base + b'"a","stop":["\\u0000"]}',
                               "stop[0]"),
                              ("invalid UTF-8 in the prompt", base + b'"a\xff"}', "prompt"),
                              ("trailing garbage", base + b'"a"} x', None)):
        st, raw, _ = srv.post("/v1/completions", body)
        err = (json.loads(raw).get("error") or {}) if st != 200 else {}
        tap(st == 400 and err.get("param") == param, f"/v1/completions with {name} is 400",
            raw[:300])


def stored_metadata_is_checked_on_the_way_out(srv, batch_id):
    """A store written before create checked metadata (or damaged since): the listing
    shows null rather than the bad bytes."""
    data_dir = srv.data_dir
    srv.own_dir = False
    rc = srv.stop()
    tap(rc == 0, "server exits 0", "".join(srv.log[-30:]))
    db = sqlite3.connect(os.path.join(data_dir, "h2oserve.db"))
    db.execute("UPDATE batches SET metadata = CAST(? AS TEXT) WHERE id = ?",
               (b'{"k":"v\xff"}', batch_id))
    db.commit()
    db.close()
    srv = Server(data_dir=data_dir)
    srv.own_dir = True
    st, raw, _ = srv.get("/v1/batches?limit=100")
    ok = st == 200 and bl.utf8(raw)
    got = [b for b in json.loads(raw)["data"] if b["id"] == batch_id] if ok else []
    tap(ok and got and got[0]["metadata"] is None,
        "stored metadata that is not UTF-8 is shown as null", raw[:300])
    st, raw, _ = srv.get(f"/v1/batches/{batch_id}")
    tap(st == 200 and bl.utf8(raw), "and so is the batch itself", raw[:300])
    return srv


def run_batch():
    """The same file through `h2oserve run-batch`: one output line per input line,
    the same codes, and an output file that is valid UTF-8."""
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "wb") as f:
            f.write(hostile_file())
        p = subprocess.run([BIN, "run-batch", "-i", inp, "-o", out, "--model", MODEL,
                            "--dtype", "fp32"], capture_output=True, timeout=300,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        raw = open(out, "rb").read() if os.path.exists(out) else b""
        tap(p.returncode == 0 and bl.utf8(raw), "run-batch's output file is valid UTF-8",
            (p.returncode, p.stderr[-500:], raw[:300]))
        outs = [json.loads(l) for l in raw.decode("utf-8", "replace").splitlines() if l]
        codes = [o["error"]["code"] if o.get("error") else (o.get("response") or {}).get(
                 "status_code") for o in outs]
        want = [code or 200 for _, code, _ in HOSTILE]
        tap(codes == want, "run-batch gives each line the code the Batches API gives it",
            (codes, want))
        ids = [o.get("custom_id") for o in outs]
        want_ids = [None] * len(HOSTILE)
        want_ids[0], want_ids[-1] = "ok1", "ok2"
        tap(ids == want_ids, "refused lines have custom_id null, never a cut id", ids)


def main():
    srv = Server()
    batches_api(srv)
    last = create_bodies(srv)
    completions_bodies(srv)
    tap(healthy(srv), "healthy after hostile input")
    srv = stored_metadata_is_checked_on_the_way_out(srv, last)
    rc = srv.stop()
    tap(rc == 0, "restarted server exits 0", "".join(srv.log[-30:]))
    run_batch()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
