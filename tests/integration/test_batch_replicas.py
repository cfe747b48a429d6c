#!/usr/bin/env python3
"""test_batch_replicas.py - replicas draining one batch together (issue 22, the
runner's part): several `h2oserve serve` on one PostgreSQL database (pglib.py),
each reached directly (the nginx deployment is test_replicas.py), with short leases
(--batch-lease-s 2) so that what a lease decides happens within the test.

What it checks, each against a single replica's run of the same file (greedy, the
same seeds: a request's answer must not depend on which replica ran it):
 - three replicas share a batch made on one of them: each claims and runs part of
   it, every custom_id is answered once, the counts are right;
 - kill -9 of a replica mid-batch: its requests are run by the others once its
   leases run out, nothing is lost or answered twice;
 - a cancel on one replica stops the batch's work on every replica within a lease;
 - SIGTERM (a drain) gives the replica's leases back: none is left in the database
   once it exits, so the others need not wait a lease;
 - the database stops for a few seconds mid-batch: completions keep being served,
   the Batches API answers 503 with Retry-After meanwhile, and the batch resumes and
   completes when the database is back, each custom_id once;
 - a batch that outlives its window on two replicas expires once: every custom_id
   is answered once, in the output or as batch_expired in the error file.

TAP output. Usage: test_batch_replicas.py H2OSERVE_BINARY
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Server, metric, completion, tap, results  # noqa: E402
import batchlib as bl  # noqa: E402
from pglib import PgServer  # noqa: E402

LEASE = 2
# Few requests in flight per replica and long answers: dummy:tiny writes thousands of
# tokens a second, and a batch must run long enough for kills and cancels to land
# in the middle of it.
FLAGS = ("--batch-lease-s", str(LEASE), "--batch-max-in-flight", "4")


def batch_file(n, prefix, max_tokens=96):
    lines = []
    for i in range(n):
        prompt = f"{prefix} request {i}: " + "word " * (i % 11)
        if i % 9 == 4:
            prompt = [prompt, f"second prompt of {i}"]
        lines.append(bl.request_line(f"{prefix}{i}", MODEL, prompt,
                                     max_tokens=max_tokens + i % 7, ignore_eos=True))
    return bl.jsonl(lines)


def result_of(line):
    body = line["response"]["body"]
    return ([(c["index"], c["text"], c["finish_reason"]) for c in body["choices"]],
            body["usage"])


def run_batch(srv, data):
    st, f = bl.upload(srv, data)
    st, b = bl.create(srv, f["id"])
    assert st == 200, b
    return b["id"]


def outputs(srv, b):
    out = bl.content(srv, b["output_file_id"])
    errs = bl.content(srv, b["error_file_id"])
    return out, errs


def reference(pg, data):
    """Every result of `data` from one replica alone: {custom_id: result}."""
    srv = Server("--job-store", pg.new_db()[0], *FLAGS)
    b = bl.wait(srv, run_batch(srv, data), timeout=300)
    out, _ = outputs(srv, b)
    srv.stop()
    return {l["custom_id"]: result_of(l) for l in out}


def same_as(out, ref, n, what):
    ids = [l["custom_id"] for l in out]
    tap(len(ids) == n and len(set(ids)) == n and set(ids) == set(ref),
        f"{what}: every custom_id once in the output ({len(ids)} lines, "
        f"{len(set(ids))} distinct)", sorted(set(ref) - set(ids))[:10])
    diff = [l["custom_id"] for l in out if result_of(l) != ref.get(l["custom_id"])]
    tap(not diff, f"{what}: every result equals the single replica's", diff[:5])


def claimed(srv):
    return metric(srv, "batch_requests_claimed_total") or 0


def wait_for(cond, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def share(pg, uri, data, ref, n):
    reps = [Server("--job-store", uri, *FLAGS) for _ in range(3)]
    bid = run_batch(reps[0], data)
    b = bl.wait(reps[1], bid, timeout=300)  # polled through another replica
    rc = b["request_counts"]
    tap(b["status"] == "completed" and rc == {"total": n, "completed": n, "failed": 0},
        "three replicas: the batch completes with the right counts", b)
    out, errs = outputs(reps[2], b)
    same_as(out, ref, n, "three replicas")
    tap(not errs, "three replicas: no error lines", errs[:3])
    per = [claimed(r) for r in reps]
    tap(all(c > 0 for c in per), f"each replica claimed part of the batch {per}", per)
    recorded = sum(metric(r, "batch_results_total") for r in reps)
    tap(recorded == n, f"the replicas recorded {recorded} results in all, one per request")
    return reps


def kill_one(reps, uri, data, ref, n):
    a, b_, c = reps
    bid = run_batch(b_, data)
    seen = [0]

    def a_runs_a_quarter_in():
        seen[0] = metric(a, "batch_requests_in_flight") or 0
        return seen[0] and bl.get(b_, bid)["request_counts"]["completed"] >= n // 4

    wait_for(a_runs_a_quarter_in, 120)
    held_before = seen[0]
    a.proc.kill()  # SIGKILL: its leases stay until they run out
    a.proc.wait()
    b = bl.wait(b_, bid, timeout=300)
    tap(held_before and b["status"] == "completed"
        and b["request_counts"] == {"total": n, "completed": n, "failed": 0},
        f"kill -9 of a replica running {held_before:.0f} requests: the others complete "
        "the batch", b)
    out, _ = outputs(c, b)
    same_as(out, ref, n, "after the kill")
    return [Server("--job-store", uri, *FLAGS), b_, c]


def cancel_everywhere(reps, data):
    a, b_, c = reps
    bid = run_batch(a, data)
    running = wait_for(lambda: all(metric(r, "batch_requests_in_flight") for r in (a, c)), 60)
    tap(running, "the batch runs on two replicas before the cancel")
    st, raw, _ = b_.post(f"/v1/batches/{bid}/cancel", {})
    tap(st == 200 and json.loads(raw)["status"] in ("cancelling", "cancelled"),
        "cancel through a third replica", raw[:300])
    t0 = time.time()
    stopped = wait_for(lambda: all(metric(r, "batch_requests_in_flight") == 0
                                   for r in (a, b_, c)), 3 * LEASE)
    took = time.time() - t0
    tap(stopped and took < LEASE + 1,
        f"every replica stopped the batch's work {took:.2f} s after the cancel (lease "
        f"{LEASE} s)")
    b = bl.wait(a, bid, timeout=30)
    done = b["request_counts"]["completed"]
    time.sleep(LEASE)
    b2 = bl.get(c, bid)
    out, _ = outputs(c, b2)
    ids = [l["custom_id"] for l in out]
    tap(b["status"] == "cancelled" and b2["request_counts"]["completed"] == done
        and len(ids) == done and len(set(ids)) == done,
        f"cancelled with {done} answered, each once, and nothing recorded after", b2)


def drain_gives_back(pg, db, reps, data, n):
    a, b_, c = reps
    bid = run_batch(b_, data)
    wait_for(lambda: metric(a, "batch_requests_in_flight"), 60)
    pid = a.proc.pid
    rc = a.stop()  # SIGTERM: the drain
    tap(rc == 0, "a draining replica exits 0", "".join(a.log[-20:]))
    left = pg.psql("SELECT count(*) FROM h2o_batch_requests WHERE state='pending'"
                   f" AND lease_owner LIKE '%:{pid}:%'", db)
    tap(left == "0" and a.stderr_has("gave back"),
        f"its leases were given back as it stopped ({left} left)",
        "".join(a.log[-20:]))
    b = bl.wait(c, bid, timeout=300)
    out, _ = outputs(c, b)
    ids = [l["custom_id"] for l in out]
    tap(b["status"] == "completed" and len(ids) == n and len(set(ids)) == n,
        "the others complete the batch, each custom_id once", b)
    return [b_, c]


def outage(pg, reps, data, ref, n):
    a, b_ = reps
    bid = run_batch(a, data)
    wait_for(lambda: bl.get(a, bid)["request_counts"]["completed"] >= n // 4, 120)
    pg.pause()
    try:
        time.sleep(0.5)
        st, body, _ = completion(a, max_tokens=4)
        tap(st == 200, "the database is down: completions are still served", body)
        st, raw, r = a.get(f"/v1/batches/{bid}")
        tap(st == 503 and r.getheader("Retry-After"),
            "the database is down: the Batches API answers 503 with Retry-After", raw[:300])
        time.sleep(2 * LEASE)
    finally:
        pg.resume()
    b = bl.wait(b_, bid, timeout=300)
    tap(b["status"] == "completed"
        and b["request_counts"] == {"total": n, "completed": n, "failed": 0},
        "the database is back: the batch completes", b)
    out, _ = outputs(a, b)
    same_as(out, ref, n, "across the outage")
    tap(a.proc.poll() is None and b_.proc.poll() is None, "no replica exited")
    tap(any("retrying" in l for l in a.log + b_.log), "the store failures were logged")


def expiry(uri):
    # One request at a time per replica and long answers: far more work than fits
    # in the 3 s window, however fast the machine.
    reps = [Server("--job-store", uri, "--batch-lease-s", str(LEASE), "--batch-max-in-flight",
                   "1", "--batch-window-s", "3") for _ in range(2)]
    n = 2000
    bid = run_batch(reps[0], batch_file(n, "e", max_tokens=256))
    b = bl.wait(reps[1], bid, timeout=60)
    out, errs = outputs(reps[1], b)
    ids = [l["custom_id"] for l in out + errs]
    rc = b["request_counts"]
    expired = [l for l in errs if l["error"] and l["error"]["code"] == "batch_expired"]
    tap(b["status"] == "expired" and 0 < rc["completed"] < n and rc["failed"] == len(expired)
        and rc["completed"] + rc["failed"] == n and len(out) == rc["completed"],
        f"expired on two replicas: {rc['completed']} answered, {len(expired)} batch_expired",
        (b, len(out)))
    tap(len(ids) == n and len(set(ids)) == n, "every custom_id once across the output and "
        "error files", len(ids))
    for r in reps:
        tap(r.stop() == 0, "expiry replica exits 0", "".join(r.log[-20:]))


def main():
    pg = PgServer()
    reps = []
    try:
        n = 300
        data = batch_file(n, "r")
        ref = reference(pg, data)
        tap(len(ref) == n, "the single-replica reference run answers every request")
        uri, db = pg.new_db()
        reps = share(pg, uri, data, ref, n)
        reps = kill_one(reps, uri, data, ref, n)
        cancel_everywhere(reps, batch_file(200, "x", max_tokens=128))
        reps = drain_gives_back(pg, db, reps, batch_file(150, "d"), 150)
        outage(pg, reps, data, ref, n)
        for r in reps:
            tap(r.stop() == 0, "replica exits 0", "".join(r.log[-20:]))
        reps = []
        expiry(uri)
    finally:
        for r in reps:
            r.proc.kill()
        pg.stop()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
