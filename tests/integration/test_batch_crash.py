#!/usr/bin/env python3
"""test_batch_crash.py - kill -9 the server while a batch runs, again and again,
restart it on the same data dir each time, and check that the batch completes with
exactly one output line per custom_id, each equal to what a clean run gives.

The batch has 240 greedy requests (some lines carry two prompts). The server is
killed right after the batch is created (while it validates) and then at several
points of its progress; counts the server reported before a kill must never go
down after the restart (a counted result is on disk).

With --pg the job store is a database on a private PostgreSQL server (pglib.py),
the clean run and the crash run each in its own; the restarts reopen the same one
and take over the dead server's requests once its leases (2 s here) run out.

TAP output. Usage: test_batch_crash.py H2OSERVE_BINARY [--pg]
"""
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Server, tap, results  # noqa: E402
import batchlib as bl  # noqa: E402

# The job store's flags: none (SQLite under each server's data dir), or with --pg
# a --job-store URI per run (main sets them).
STORE = {"clean": (), "crash": ()}
N = 240
KILL_AT = [0.0, 0.15, 0.35, 0.55, 0.75, 0.9]  # fractions of N completed
FLAGS = ("--batch-max-in-flight", "3")


def input_lines():
    lines = []
    for i in range(N):
        prompt = f"request {i}: " + "word " * (i % 13)
        if i % 10 == 3:
            prompt = [prompt, f"second prompt of {i}"]
        lines.append(bl.request_line(f"c{i}", MODEL, prompt, max_tokens=24 + i % 17,
                                     ignore_eos=True))
    return bl.jsonl(lines)


def result_of(line):
    """What must match between runs: the choices and the token counts."""
    body = line["response"]["body"]
    return ([(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]],
            body["usage"])


def clean_run(data):
    srv = Server(*STORE["clean"])
    st, f = bl.upload(srv, data)
    b = bl.wait(srv, bl.create(srv, f["id"])[1]["id"], timeout=300)
    out = bl.content(srv, b["output_file_id"])
    rc = srv.stop()
    tap(rc == 0, "clean server exits 0", "".join(srv.log[-30:]))
    tap(b["status"] == "completed" and len(out) == N, "clean run completes", b)
    return {l["custom_id"]: result_of(l) for l in out}


def crash_run(data):
    srv = Server(*FLAGS, *STORE["crash"])
    data_dir = srv.data_dir
    srv.own_dir = False
    st, f = bl.upload(srv, data)
    st, b = bl.create(srv, f["id"])
    bid = b["id"]
    seen = 0  # the most completed the server has reported
    ok_counts = True
    for k, frac in enumerate(KILL_AT):
        target = int(frac * N)
        deadline = time.time() + 120
        while target and time.time() < deadline:
            c = bl.get(srv, bid)
            ok_counts &= c["request_counts"]["completed"] >= seen
            seen = max(seen, c["request_counts"]["completed"])
            if seen >= target or c["status"] in bl.TERMINAL:
                break
            time.sleep(0.005)
        srv.proc.kill()  # SIGKILL: no drain, no cleanup
        srv.proc.wait()
        srv = Server(*FLAGS, *STORE["crash"], data_dir=data_dir)
        c = bl.get(srv, bid)
        ok_counts &= c["request_counts"]["completed"] >= seen
        tap(c["status"] not in ("failed", "cancelled", "expired"),
            f"kill {k + 1} at {seen}/{N} completed: the batch is still alive ({c['status']})",
            c)
    c = bl.wait(srv, bid, timeout=300)
    tap(ok_counts, "a counted result is never lost across a kill")
    out = bl.content(srv, c["output_file_id"])
    errs = bl.content(srv, c["error_file_id"])
    rc = srv.stop()
    tap(rc == 0, "the last restarted server exits 0", "".join(srv.log[-30:]))
    shutil.rmtree(data_dir, ignore_errors=True)
    tap(c["status"] == "completed" and c["request_counts"] == {"total": N, "completed": N,
                                                               "failed": 0} and not errs,
        "after the kills the batch completes", c)
    return out


def main():
    pg = None
    if "--pg" in sys.argv[2:]:
        from pglib import PgServer
        pg = PgServer()
        STORE["clean"] = ("--job-store", pg.new_db()[0])
        # A kill -9 leaves the dead server's leases in the database; the restarted one
        # is a new owner and runs those requests once they run out, so the lease is
        # short here (SQLite clears them at open: one process per data dir).
        STORE["crash"] = ("--job-store", pg.new_db()[0], "--batch-lease-s", "2")
    try:
        check(input_lines())
    finally:
        if pg:
            pg.stop()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


def check(data):
    clean = clean_run(data)
    out = crash_run(data)
    ids = [l["custom_id"] for l in out]
    tap(len(ids) == N and sorted(ids) == sorted(clean),
        "exactly one output line per custom_id", [i for i in set(ids) if ids.count(i) > 1][:5])
    diff = [l["custom_id"] for l in out if result_of(l) != clean.get(l["custom_id"])]
    tap(not diff, "every result equals the clean run's", diff[:5])


if __name__ == "__main__":
    sys.exit(main())
