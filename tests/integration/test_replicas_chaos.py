#!/usr/bin/env python3
"""test_replicas_chaos.py - issue 22's acceptance test: a 2000-line batch through
nginx (deploy/nginx/h2oserve.conf) over three replicas on one PostgreSQL database,
while a random replica is killed with SIGKILL every few seconds and started again on
its port after a short pause. At the end the batch is completed with every custom_id
exactly once in its output, request_counts say 2000 of 2000 and no failure, and
every result equals that of one replica running the same file alone on a database
of its own (greedy, the same seeds).

The kills and the batch's wall time go to the log (TAP comments). The replicas share
the batch (leased claims), and a killed replica's requests go to the others once
its leases run out; the database shows how many processes (replicas and their
restarts) claimed the requests that were answered.

TAP output. Usage: test_replicas_chaos.py H2OSERVE_BINARY
"""
import http.client
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Server, tap, results  # noqa: E402
from test_batch_crash import result_of  # noqa: E402
import batchlib as bl  # noqa: E402
from nginxlib import Deployment  # noqa: E402

N = 2000
LEASE_S = 5
FLAGS = ("--batch-max-in-flight", "1")
KILL_GAP_S = (1.0, 2.5)  # between one replica's restart and the next kill
PAUSE_S = (0.3, 1.0)  # how long a killed replica stays down


def input_lines():
    lines = []
    for i in range(N):
        prompt = f"line {i}: " + "word " * (i % 7)
        if i % 50 == 7:
            prompt = [prompt, f"the second prompt of {i}"]
        lines.append(bl.request_line(f"q{i}", MODEL, prompt, max_tokens=32 + i % 33,
                                     ignore_eos=True))
    return bl.jsonl(lines)


def run_batch(endpoint, data):
    """Upload data and create its batch through endpoint; the batch's id."""
    st, f = bl.upload(endpoint, data)
    assert st == 200, f
    st, b = bl.create(endpoint, f["id"])
    assert st == 200, b
    return b["id"]


def reference(uri, data):
    """One replica alone on its own database: {custom_id: result_of(line)}."""
    srv = Server(*FLAGS, "--job-store", uri)
    t0 = time.time()
    b = bl.wait(srv, run_batch(srv, data), timeout=600)
    out = bl.content(srv, b["output_file_id"])
    print(f"# the reference run (one replica): {time.time() - t0:.1f} s")
    tap(b["status"] == "completed" and len(out) == N and srv.stop() == 0,
        "the reference run on one replica completes", b)
    return {l["custom_id"]: result_of(l) for l in out}


def poll(ng, bid):
    """The batch through nginx; None when the replica that answered died mid-answer
    (nginx passes a GET on only when nothing of the answer has gone out)."""
    try:
        return bl.get(ng, bid)
    except (OSError, http.client.HTTPException, ValueError):
        return None


def chaos(dep, data, rng):
    """The batch through nginx while replicas die; (its last state, kills, seconds)."""
    ng, reps = dep.nginx, dep.replicas
    bid = run_batch(ng, data)
    t0 = time.time()
    kills, seen, monotonic = 0, 0, True
    next_kill = t0 + rng.uniform(*KILL_GAP_S) / 2
    b = None
    while time.time() - t0 < 600:
        b = poll(ng, bid) or b
        if b:
            done = b["request_counts"]["completed"]
            monotonic &= done >= seen
            seen = max(seen, done)
            if b["status"] in bl.TERMINAL:
                break
        if time.time() >= next_kill:
            i = rng.randrange(len(reps.srv))
            reps.kill(i)
            kills += 1
            print(f"# {time.time() - t0:5.1f} s: kill -9 replica {i} "
                  f"({seen}/{N} completed, {b and b['status']})")
            time.sleep(rng.uniform(*PAUSE_S))
            reps.start(i)
            next_kill = time.time() + rng.uniform(*KILL_GAP_S)
        time.sleep(0.1)
    took = time.time() - t0
    print(f"# the batch took {took:.1f} s through {kills} kills")
    tap(monotonic, "request_counts.completed never went down across the kills")
    return b, kills, took


def main():
    seed = int(os.environ.get("H2O_CHAOS_SEED") or time.time())
    print(f"# seed {seed} (H2O_CHAOS_SEED={seed} repeats the kills' choices)")
    rng = random.Random(seed)
    data = input_lines()
    lease = ("--batch-lease-s", str(LEASE_S))
    print("# replicas: " + " ".join(lease))
    dep = Deployment(3, *FLAGS, *lease)
    try:
        # The reference first, on a database of its own; the three replicas wait idle.
        ref = reference(dep.pg.new_db()[0], data)
        b, kills, took = chaos(dep, data, rng)
        check(dep.nginx, b, kills, took, ref)
        if b:
            shared(dep, b["id"])
    finally:
        dep.stop()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


def check(ng, b, kills, took, ref):
    tap(kills >= 2, f"{kills} replicas were killed while the batch ran ({took:.1f} s)")
    tap(b and b["status"] == "completed"
        and b["request_counts"] == {"total": N, "completed": N, "failed": 0},
        "the batch completes: 2000 of 2000, none failed", b)
    if not (b and b["output_file_id"]):
        return
    out = bl.content(ng, b["output_file_id"])
    errs = bl.content(ng, b["error_file_id"])
    tap(not errs, "nothing in the error file", errs[:3])
    ids = [l["custom_id"] for l in out]
    tap(len(ids) == N and sorted(ids) == sorted(ref),
        "every custom_id exactly once in the output",
        [i for i in set(ids) if ids.count(i) > 1][:5] or len(ids))
    diff = [l["custom_id"] for l in out if result_of(l) != ref.get(l["custom_id"])]
    tap(not diff, "every result equals the single replica's", diff[:5])


def shared(dep, bid):
    """A request keeps the lease of the last replica that claimed it (owner
    host:pid:random), answered or not: the processes that ran the batch."""
    pids = dep.pg.psql("SELECT count(DISTINCT split_part(lease_owner, ':', 2)) FROM"
                       f" h2o_batch_requests WHERE batch_id='{bid}'", dep.db)
    tap(int(pids) >= 3, f"the requests were claimed by {pids} processes (three replicas "
        "and their restarts)", pids)


if __name__ == "__main__":
    sys.exit(main())
