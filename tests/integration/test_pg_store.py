#!/usr/bin/env python3
"""test_pg_store.py - h2oserve serve with --job-store postgresql://... (issue 22, the
store's part): the Files and Batches API of the real binary over real HTTP, with
everything kept in a private PostgreSQL server (pglib.py), then a second replica on
the same database that sees what the first made and serves the same bytes.

Not here yet (docs/deploy.md): replicas draining one batch together (claims and
leases), a cancel on one replica stopping another's work. Replicas behind nginx:
test_replicas.py and test_replicas_chaos.py.

TAP output. Usage: test_pg_store.py H2OSERVE_BINARY
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Server, tap, results  # noqa: E402
import batchlib as bl  # noqa: E402
from pglib import PgServer  # noqa: E402


def main():
    pg = PgServer()
    try:
        run(pg)
    finally:
        pg.stop()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


def run(pg):
    uri, db = pg.new_db()
    a = Server("--job-store", uri)
    tap(pg.psql("SELECT version FROM h2o_schema", db) == "1",
        "the schema is made at the first open")

    # One batch through replica A.
    reqs = [bl.request_line(f"r{i}", MODEL, f"hello number {i}", max_tokens=3 + i % 4)
            for i in range(40)]
    body = bl.jsonl(reqs)
    st, f = bl.upload(a, body)
    tap(st == 200 and f["bytes"] == len(body), "upload the input file", f)
    st, raw, _ = a.get(f"/v1/files/{f['id']}/content")
    tap(st == 200 and raw == body, "its content comes back from the database", raw[:200])
    st, b = bl.create(a, f["id"])
    tap(st == 200 and b["status"] == "validating", "create a batch", b)
    b = bl.wait(a, b["id"])
    rc = b["request_counts"]
    tap(b["status"] == "completed" and rc == {"total": 40, "completed": 40, "failed": 0},
        "the batch completes", b)
    out_raw = bl.content_raw(a, b["output_file_id"])
    ids = [json.loads(x)["custom_id"] for x in out_raw.decode().splitlines()]
    tap(sorted(ids) == sorted(f"r{i}" for i in range(40)) and len(set(ids)) == 40,
        "every custom_id once in the output", ids)
    n_rows = pg.psql(f"SELECT count(*) FROM h2o_batch_results WHERE batch_id='{b['id']}'", db)
    tap(n_rows == "40", "one result row per request in the database", n_rows)

    # Replica B on the same database: what A made is B's to serve.
    bsrv = Server("--job-store", uri)
    st, raw, _ = bsrv.get(f"/v1/batches/{b['id']}")
    tap(st == 200 and json.loads(raw)["status"] == "completed"
        and json.loads(raw)["request_counts"] == rc, "replica B sees A's batch", raw[:300])
    tap(bl.content_raw(bsrv, b["output_file_id"]) == out_raw,
        "replica B serves the same output bytes")
    st, raw, _ = bsrv.get("/v1/files?purpose=batch_output")
    tap(st == 200 and b["output_file_id"] in [x["id"] for x in json.loads(raw)["data"]],
        "replica B lists A's output file")

    # A body of several 1 MiB chunks, uploaded to B and read back through A.
    big = b"".join(bl.request_line(f"big{i}", MODEL, "x" * 200).encode() + b"\n"
                   for i in range(12000))
    st, g = bl.upload(bsrv, big, filename="big.jsonl")
    tap(st == 200 and g["bytes"] == len(big), "a multi-chunk upload to B", g)
    chunks = pg.psql(f"SELECT count(*) FROM h2o_file_chunks WHERE file_id='{g['id']}'", db)
    tap(int(chunks) == (len(big) + (1 << 20) - 1) >> 20, "stored in 1 MiB chunks", chunks)
    st, raw, _ = a.get(f"/v1/files/{g['id']}/content")
    tap(st == 200 and raw == big, "A serves B's upload byte for byte", len(raw))
    st, raw, _ = a.request("DELETE", f"/v1/files/{g['id']}")
    tap(st == 200, "delete it on A", raw)
    st, raw, _ = bsrv.get(f"/v1/files/{g['id']}")
    left = pg.psql(f"SELECT count(*) FROM h2o_file_chunks WHERE file_id='{g['id']}'", db)
    tap(st == 404 and left == "0", "gone for B, its chunks with it", (st, left))

    tap(bsrv.stop() == 0, "replica B stops cleanly")
    tap(a.stop() == 0, "replica A stops cleanly")

    # A database that is not reachable: the server says so and does not start.
    try:
        Server("--job-store", "postgresql:///nodb?host=/nonexistent&connect_timeout=2")
        tap(False, "an unreachable database stops the start")
    except RuntimeError as e:
        tap("job store (postgresql)" in str(e) and "/nonexistent" in str(e),
            "an unreachable database stops the start, with the reason", str(e)[-400:])


if __name__ == "__main__":
    sys.exit(main())
