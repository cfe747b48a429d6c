#!/usr/bin/env python3
"""test_batches.py - the Batches API over real HTTP: the whole flow, invalid input
files, per-request errors, cancel mid-run, expiry, listing and pagination, bad
create requests, and a graceful restart in the middle of a batch.

TAP output. Usage: test_batches.py H2OSERVE_BINARY
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Server, completion, healthy, metric, tap, results  # noqa: E402
import batchlib as bl  # noqa: E402


def stop_ok(srv, name):
    """Stop the server; a non-zero exit (an ASan report) shows its log."""
    rc = srv.stop()
    tap(rc == 0, name, f"exit {rc}\n" + "".join(srv.log[-30:]))


def lines_by_id(lines):
    return {l["custom_id"]: l for l in lines}


def whole_flow(srv):
    reqs = [bl.request_line(f"r{i}", MODEL, f"hello number {i}", max_tokens=6 + i % 5)
            for i in range(24)]
    st, f = bl.upload(srv, bl.jsonl(reqs))
    tap(st == 200 and f["purpose"] == "batch", "upload the input file", f)
    st, b = bl.create(srv, f["id"], metadata={"job": "nightly"})
    fields = ["id", "object", "endpoint", "errors", "input_file_id", "completion_window",
              "status", "output_file_id", "error_file_id", "created_at", "in_progress_at",
              "expires_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
              "cancelling_at", "cancelled_at", "request_counts", "metadata"]
    tap(st == 200 and all(k in b for k in fields) and b["object"] == "batch"
        and b["status"] == "validating" and b["id"].startswith("batch_")
        and b["expires_at"] == b["created_at"] + 86400 and b["metadata"] == {"job": "nightly"}
        and b["output_file_id"] is None and b["request_counts"]["total"] == 0,
        "create returns a Batch in validating", b)
    b = bl.wait(srv, b["id"])
    rc = b["request_counts"]
    tap(b["status"] == "completed" and rc == {"total": 24, "completed": 24, "failed": 0}
        and b["in_progress_at"] and b["finalizing_at"] and b["completed_at"]
        and b["error_file_id"] is None and b["output_file_id"], "the batch completes", b)
    out = bl.content(srv, b["output_file_id"])
    ids = [l["custom_id"] for l in out]
    tap(sorted(ids) == sorted(f"r{i}" for i in range(24)) and len(set(ids)) == 24,
        "one output line per custom_id", ids)
    ok = all(l["id"].startswith("batch_req_") and l["error"] is None
             and l["response"]["status_code"] == 200
             and l["response"]["request_id"] == l["response"]["body"]["id"]
             and l["response"]["body"]["object"] == "text_completion" for l in out)
    tap(ok, "output lines have OpenAI's form", out[0])
    # A batch request answers exactly what the same request answers interactively.
    by = lines_by_id(out)
    same = True
    for i in (0, 7, 23):
        st, c, _ = completion(srv, prompt=f"hello number {i}", max_tokens=6 + i % 5, temperature=0)
        got = by[f"r{i}"]["response"]["body"]
        same &= st == 200 and c["choices"][0]["text"] == got["choices"][0]["text"] \
            and c["usage"] == got["usage"]
    tap(same, "batch results equal interactive completions (greedy)")
    u = b["usage"]
    tap(u["input_tokens"] == sum(l["response"]["body"]["usage"]["prompt_tokens"] for l in out)
        and u["output_tokens"] == sum(l["response"]["body"]["usage"]["completion_tokens"]
                                      for l in out)
        and u["total_tokens"] == u["input_tokens"] + u["output_tokens"], "usage adds up", u)
    st, raw, _ = srv.get(f"/v1/files/{b['output_file_id']}")
    of = json.loads(raw)
    tap(st == 200 and of["purpose"] == "batch_output", "the output file is a File", of)
    st, raw, _ = srv.get("/v1/files?purpose=batch_output")
    tap(st == 200 and b["output_file_id"] in [x["id"] for x in json.loads(raw)["data"]],
        "the output file is listed")
    return b


def invalid_files(srv):
    good = lambda i: bl.request_line(f"ok{i}", MODEL, "x")  # noqa: E731
    lines = [
        good(1),
        "{not json",                                                        # 2
        good(3),
        bl.request_line("ok1", MODEL, "again"),                             # 4 duplicate
        json.dumps({"custom_id": "u", "method": "POST", "url": "/v1/chat/completions",
                    "body": {"model": MODEL, "prompt": "x"}}),             # 5 wrong url
        bl.request_line("m", "some-other-model", "x"),                      # 6 wrong model
        "",                                                                 # 7 blank: skipped
        json.dumps({"method": "POST", "url": "/v1/completions",
                    "body": {"model": MODEL, "prompt": "x"}}),             # 8 no custom_id
        json.dumps({"custom_id": "g", "method": "GET", "url": "/v1/completions",
                    "body": {"model": MODEL}}),                             # 9 wrong method
        bl.request_line("s", MODEL, "x", stream=True),                      # 10 stream
        json.dumps({"custom_id": "b", "method": "POST", "url": "/v1/completions",
                    "body": "text"}),                                      # 11 body not object
        good(12),
        good(13) + good(14),                                                # 13 two objects
        good(15) + " trailing",                                             # 14 trailing text
    ]
    st, f = bl.upload(srv, bl.jsonl(lines))
    st, b = bl.create(srv, f["id"])
    b = bl.wait(srv, b["id"])
    errs = (b.get("errors") or {}).get("data", [])
    got = [(e["line"], e["code"]) for e in errs]
    want = [(2, "invalid_json"), (4, "duplicate_custom_id"), (5, "invalid_url"),
            (6, "model_not_found"), (8, "missing_custom_id"), (9, "invalid_method"),
            (10, "invalid_body"), (11, "invalid_body"), (13, "invalid_json"),
            (14, "invalid_json")]
    tap(b["status"] == "failed" and b["failed_at"] and got == want
        and b["errors"]["object"] == "list" and all("message" in e and "param" in e for e in errs)
        and b["request_counts"]["total"] == 0 and b["output_file_id"] is None,
        "an invalid file fails the batch with every bad line numbered", got)
    tap(b["in_progress_at"] is None, "nothing of a failed batch ran", b)

    # Lines ended by CR alone are one line to JSONL: never a silently shorter batch.
    st, f = bl.upload(srv, "\r".join(good(i) for i in range(3)).encode())
    b = bl.wait(srv, bl.create(srv, f["id"])[1]["id"])
    tap(b["status"] == "failed" and b["errors"]["data"][0]["code"] == "invalid_json",
        "CR-only line ends fail the batch", b.get("errors"))

    st, f = bl.upload(srv, b"\n\n")
    b = bl.wait(srv, bl.create(srv, f["id"])[1]["id"])
    tap(b["status"] == "failed" and b["errors"]["data"][0]["code"] == "empty_file",
        "an empty file fails", b.get("errors"))


def request_errors(srv):
    """Valid lines the API refuses go to the error file; the rest run."""
    lines = [bl.request_line("a", MODEL, "fine"),
             bl.request_line("b", MODEL, "bad temperature", temperature=7),
             bl.request_line("c", MODEL, "too long", max_tokens=10 ** 6),
             bl.request_line("d", MODEL, "fine too")]
    st, f = bl.upload(srv, bl.jsonl(lines))
    b = bl.wait(srv, bl.create(srv, f["id"])[1]["id"])
    errs = lines_by_id(bl.content(srv, b["error_file_id"]))
    outs = lines_by_id(bl.content(srv, b["output_file_id"]))
    tap(b["status"] == "completed"
        and b["request_counts"] == {"total": 4, "completed": 2, "failed": 2}
        and sorted(outs) == ["a", "d"] and sorted(errs) == ["b", "c"]
        and all(e["response"]["status_code"] == 400 and "error" in e["response"]["body"]
                and e["error"] is None for e in errs.values()),
        "refused requests go to the error file with their 400 body", (b, errs))


def slow_batch(srv, n, prefix="s", max_tokens=48):
    lines = [bl.request_line(f"{prefix}{i}", MODEL, f"slow {i}", max_tokens=max_tokens,
                             ignore_eos=True) for i in range(n)]
    st, f = bl.upload(srv, bl.jsonl(lines))
    return bl.create(srv, f["id"])[1]


def cancel_mid_run():
    srv = Server("--batch-max-in-flight", "1")
    b = slow_batch(srv, 60)
    bl.wait(srv, b["id"], until=("in_progress",))
    deadline = time.time() + 60
    while bl.get(srv, b["id"])["request_counts"]["completed"] < 3 and time.time() < deadline:
        time.sleep(0.01)
    # Sampled a few times: between one request's end and the next one's start there
    # may be a moment with none (the next claim is a store job), never two.
    seen = [(metric(srv, "batches_running"), metric(srv, "batch_requests_in_flight"))
            for _ in range(10)]
    tap(all(r == 1 for r, _ in seen) and max(n for _, n in seen) == 1,
        "metrics: one batch running, --batch-max-in-flight 1 request in the engine", seen)
    st, raw, _ = srv.post(f"/v1/batches/{b['id']}/cancel", {})
    c = json.loads(raw)
    tap(st == 200 and c["status"] == "cancelling" and c["cancelling_at"],
        "cancel returns the batch in cancelling", c)
    c = bl.wait(srv, b["id"])
    out = bl.content(srv, c["output_file_id"])
    n = c["request_counts"]["completed"]
    tap(c["status"] == "cancelled" and c["cancelled_at"] and 3 <= n < 60 and len(out) == n
        and len({l["custom_id"] for l in out}) == n,
        f"cancelled mid-run with the partial output ({n} of 60)", c)
    time.sleep(0.5)
    tap(bl.get(srv, b["id"])["request_counts"]["completed"] == n,
        "nothing is recorded after the cancel")
    st, raw, _ = srv.post(f"/v1/batches/{b['id']}/cancel", {})
    tap(st == 400, "cancelling a cancelled batch is 400", raw)
    st, raw, _ = srv.post("/v1/batches/batch_nope/cancel", {})
    tap(st == 404, "cancelling an unknown batch is 404", raw)
    tap(metric(srv, "batches_running") == 0 and metric(srv, "batch_requests_in_flight") == 0
        and metric(srv, "kv_cache_blocks_used") == 0, "after the cancel nothing is in flight")
    tap(healthy(srv), "cancel server healthy")
    stop_ok(srv, "cancel server exits 0")


def expiry():
    srv = Server("--batch-max-in-flight", "1", "--batch-window-s", "2")
    b = slow_batch(srv, 1000, max_tokens=256)
    tap(b["expires_at"] == b["created_at"] + 2, "expires_at follows --batch-window-s", b)
    b = bl.wait(srv, b["id"], timeout=60)
    errs = bl.content(srv, b["error_file_id"])
    out = bl.content(srv, b["output_file_id"])
    rc = b["request_counts"]
    tap(b["status"] == "expired" and b["expired_at"] and rc["total"] == 1000
        and rc["completed"] == len(out) and rc["failed"] == len(errs) == 1000 - len(out)
        and all(e["error"]["code"] == "batch_expired" and e["response"] is None for e in errs)
        and {l["custom_id"] for l in out} | {e["custom_id"] for e in errs}
        == {f"s{i}" for i in range(1000)},
        f"an expired batch keeps {len(out)} results and lists the rest as batch_expired", rc)
    stop_ok(srv, "expiry server exits 0")


def listing(srv, done):
    ids = [done["id"]]
    st, f = bl.upload(srv, bl.jsonl([bl.request_line("x", MODEL, "x")]))
    for _ in range(3):
        ids.append(bl.create(srv, f["id"])[1]["id"])
    st, raw, _ = srv.get("/v1/batches?limit=2")
    page = json.loads(raw)
    all_ids = []
    st2, raw2, _ = srv.get("/v1/batches?limit=100")
    all_ids = [x["id"] for x in json.loads(raw2)["data"]]
    tap(st == 200 and page["object"] == "list" and len(page["data"]) == 2
        and page["has_more"] and page["first_id"] == all_ids[0]
        and page["last_id"] == all_ids[1] and all_ids[0] == ids[-1],
        "list is newest first, limit and has_more", page)
    seen, after = [], None
    while True:
        q = "/v1/batches?limit=3" + (f"&after={after}" if after else "")
        st, raw, _ = srv.get(q)
        p = json.loads(raw)
        seen += [x["id"] for x in p["data"]]
        if not p["has_more"]:
            break
        after = p["last_id"]
    tap(seen == all_ids and set(ids) <= set(seen), "after pages through every batch", seen)
    for q, want in (("limit=0", 400), ("limit=101", 400), ("limit=x", 400),
                    ("after=batch_unknown", 400)):
        st, raw, _ = srv.get("/v1/batches?" + q)
        tap(st == want, f"list {q} is {want}", raw)
    st, raw, _ = srv.get(f"/v1/batches/{ids[0]}")
    tap(st == 200 and json.loads(raw)["id"] == ids[0], "retrieve by id")
    for path, want in (("/v1/batches/batch_none", 404), ("/v1/batches/..%2f", 404),
                       ("/v1/batches/" + "a" * 200, 404), (f"/v1/batches/{ids[0]}/x", 404)):
        st, raw, _ = srv.get(path)
        tap(st == want, f"GET {path[:40]} is {want}", raw)
    st, raw, _ = srv.request("DELETE", f"/v1/batches/{ids[0]}")
    tap(st == 405, "DELETE a batch is 405", raw)
    for i in ids[1:]:
        bl.wait(srv, i)


def bad_creates(srv):
    st, f = bl.upload(srv, bl.jsonl([bl.request_line("x", MODEL, "x")]))
    fid = f["id"]
    cases = [
        ("no input_file_id", {"endpoint": "/v1/completions", "completion_window": "24h"}, 400),
        ("unknown file", {"input_file_id": "file-nope", "endpoint": "/v1/completions",
                          "completion_window": "24h"}, 404),
        ("embeddings endpoint", {"input_file_id": fid, "endpoint": "/v1/embeddings",
                                 "completion_window": "24h"}, 400),
        ("48h window", {"input_file_id": fid, "endpoint": "/v1/completions",
                        "completion_window": "48h"}, 400),
        ("no window", {"input_file_id": fid, "endpoint": "/v1/completions"}, 400),
        ("17 metadata keys", {"input_file_id": fid, "endpoint": "/v1/completions",
                              "completion_window": "24h",
                              "metadata": {f"k{i}": "v" for i in range(17)}}, 400),
        ("metadata number", {"input_file_id": fid, "endpoint": "/v1/completions",
                             "completion_window": "24h", "metadata": {"k": 1}}, 400),
        ("long metadata value", {"input_file_id": fid, "endpoint": "/v1/completions",
                                 "completion_window": "24h", "metadata": {"k": "v" * 513}}, 400),
    ]
    for name, body, want in cases:
        st, raw, _ = srv.post("/v1/batches", body)
        err = json.loads(raw).get("error", {})
        tap(st == want and err.get("message"), f"create with {name} is {want}", raw)
    for body in (b"{not json", b"[]", b""):
        st, raw, _ = srv.post("/v1/batches", body)
        tap(st == 400, f"create with body {body!r} is 400", raw)
    # An output file is not an input file.
    st, raw, _ = srv.get("/v1/files?purpose=batch_output&limit=1")
    out_id = json.loads(raw)["data"][0]["id"]
    st, raw, _ = srv.post("/v1/batches", {"input_file_id": out_id, "endpoint": "/v1/completions",
                                          "completion_window": "24h"})
    tap(st == 400, "a batch_output file cannot be a batch's input", raw)
    st, raw, _ = srv.get("/v1/batches?limit=100")
    tap(healthy(srv), "healthy after bad creates")


def too_many_requests():
    srv = Server("--batch-max-requests", "5")
    st, f = bl.upload(srv, bl.jsonl([bl.request_line(f"r{i}", MODEL, "x") for i in range(6)]))
    b = bl.wait(srv, bl.create(srv, f["id"])[1]["id"])
    tap(b["status"] == "failed" and b["errors"]["data"][-1]["code"] == "too_many_requests",
        "a file over --batch-max-requests fails", b.get("errors"))
    stop_ok(srv, "max-requests server exits 0")


def graceful_restart():
    """SIGTERM mid-batch, restart on the same data dir: the batch resumes and ends with
    one line per custom_id."""
    srv = Server("--batch-max-in-flight", "2")
    b = slow_batch(srv, 40, prefix="g", max_tokens=32)
    deadline = time.time() + 60
    while bl.get(srv, b["id"])["request_counts"]["completed"] < 5 and time.time() < deadline:
        time.sleep(0.01)
    data_dir = srv.data_dir
    srv.own_dir = False
    stop_ok(srv, "SIGTERM during a batch exits 0")
    srv = Server("--batch-max-in-flight", "2", data_dir=data_dir)
    srv.own_dir = True
    c = bl.wait(srv, b["id"])
    out = bl.content(srv, c["output_file_id"])
    ids = [l["custom_id"] for l in out]
    tap(c["status"] == "completed" and c["request_counts"]["completed"] == 40
        and sorted(ids) == sorted(f"g{i}" for i in range(40)),
        "after a restart the batch completes with one line per custom_id", c)
    stop_ok(srv, "restarted server exits 0")


def main():
    srv = Server()
    done = whole_flow(srv)
    invalid_files(srv)
    request_errors(srv)
    listing(srv, done)
    bad_creates(srv)
    stop_ok(srv, "server exits 0")
    cancel_mid_run()
    expiry()
    too_many_requests()
    graceful_restart()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
