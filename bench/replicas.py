#!/usr/bin/env python3
"""replicas.py - one batch drained by 1, 2 and 3 replicas of `h2oserve serve` sharing
one PostgreSQL database, against one replica on SQLite (the embedded default), and
the claim rate the database sustains without the engine (bench_claims).

On a machine with few cores the replicas share them, so the batch's speed-up is not
the point here; what the runs show is what the shared database costs: the store
time the runner spends per request (its store jobs' time over the results they
recorded, from each replica's /metrics), claims and commits per second, and how many
results a commit carries. Runs of each setting take turns round after round
(--rounds), and every run is printed.

A private PostgreSQL server is started for the run (initdb in a temporary folder,
tests/integration/pglib.py, with fsync on), each run on a fresh database; --job-store URI uses a
server of yours instead (its database must be empty or h2oserve's).

Usage: bench/replicas.py [--build build] [--requests 2000] [--max-tokens 16]
                         [--replicas 1,2,3] [--rounds 2] [--threads-per-replica 1]
                         [--no-claims] [--job-store URI]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
sys.path.insert(0, HERE)
import batchlib as bl  # noqa: E402
from pglib import PgServer  # noqa: E402
from serverlib import Server  # noqa: E402


def batch_file(n, max_tokens):
    return bl.jsonl([bl.request_line(f"r{i}", "dummy:tiny", f"request {i}: " + "word " * (i % 13),
                                     max_tokens=max_tokens, ignore_eos=True)
                     for i in range(n)])


def one_run(exe, store_args, n_replicas, data, n, args):
    reps = [Server(exe, "dummy:tiny", ["--dtype", "fp32", "--batch-max-in-flight",
                                       str(args.max_in_flight), *store_args],
                   env={"OMP_NUM_THREADS": str(args.threads_per_replica)})
            for _ in range(n_replicas)]
    try:
        st, f = bl.upload(reps[0], data)
        assert st == 200, f
        t0 = time.time()
        st, b = bl.create(reps[0], f["id"])
        assert st == 200, b
        # Polled through each replica in turn, as a client behind a balancer would.
        k = 0
        while True:
            b = bl.get(reps[k % n_replicas], b["id"])
            k += 1
            if b["status"] in bl.TERMINAL:
                break
            time.sleep(0.02)
        wall = time.time() - t0
        if b["status"] != "completed" or b["request_counts"]["completed"] != n:
            raise RuntimeError(f"the batch did not complete: {b}")
        out = bl.content(reps[0], b["output_file_id"])
        ids = [x["custom_id"] for x in out]
        if len(ids) != n or len(set(ids)) != n:
            raise RuntimeError(f"{len(ids)} output lines, {len(set(ids))} distinct")
        ms = [r.metrics() for r in reps]
    finally:
        for r in reps:
            r.stop()

    def total(key):
        return sum(m.get(key, 0.0) for m in ms)

    results = total("batch_results_total")
    return {
        "replicas": n_replicas,
        "wall_s": wall,
        "requests_per_s": n / wall,
        "store_ms_per_request": 1e3 * total("batch_store_seconds_total") / results,
        "claims_per_s": total("batch_claims_total") / wall,
        "commits_per_s": total("batch_commits_total") / wall,
        "results_per_commit": results / max(total("batch_commits_total"), 1),
        "store_errors": total("batch_store_errors_total"),
        "per_replica": [int(m.get("batch_results_total", 0)) for m in ms],
    }


def show(store, r):
    print(f"batch: {store:10s} replicas {r['replicas']}: {r['wall_s']:6.2f} s, "
          f"{r['requests_per_s']:6.1f} requests/s; store {r['store_ms_per_request']:.3f} "
          f"ms/request; {r['claims_per_s']:.1f} claims/s, {r['commits_per_s']:.1f} "
          f"commits/s, {r['results_per_commit']:.1f} results a commit; results per "
          f"replica {r['per_replica']}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--replicas", default="1,2,3")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads-per-replica", type=int, default=1)
    ap.add_argument("--max-in-flight", type=int, default=64)
    ap.add_argument("--no-claims", action="store_true", help="skip bench_claims")
    ap.add_argument("--job-store", help="a PostgreSQL URI of yours (default: a private one)")
    args = ap.parse_args()
    exe = os.path.join(args.build, "server", "h2oserve")
    claims_exe = os.path.join(args.build, "bench", "bench_claims")
    counts = [int(x) for x in args.replicas.split(",")]
    data = batch_file(args.requests, args.max_tokens)
    # fsync on: a commit that returned is on the disk, as in production.
    pg = None if args.job_store else PgServer(fsync=True)
    runs = []
    try:
        def new_uri():
            return args.job_store if args.job_store else pg.new_db()[0]

        for rnd in range(1, args.rounds + 1):
            r = one_run(exe, [], 1, data, args.requests, args)
            r.update(store="sqlite", round=rnd)
            show("sqlite", r)
            runs.append(r)
            for n in counts:
                r = one_run(exe, ["--job-store", new_uri()], n, data, args.requests, args)
                r.update(store="postgresql", round=rnd)
                show("postgresql", r)
                runs.append(r)
        if not args.no_claims:
            # The database alone: threads stand for replicas, no engine between a claim
            # and its commit, so this is the most the store hands out.
            for chunk in (1, 16):
                subprocess.run([claims_exe, "--job-store", new_uri(), "--threads", "1,2,4,8",
                                "--requests", str(args.requests), "--chunk", str(chunk),
                                "--rounds", str(args.rounds)], check=True)
            with tempfile.TemporaryDirectory() as d:
                subprocess.run([claims_exe, "--job-store", d, "--threads", "1",
                                "--requests", str(args.requests), "--chunk", "16",
                                "--rounds", str(args.rounds)], check=True)
    finally:
        if pg:
            pg.stop()
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
