#!/usr/bin/env python3
"""test_load.py - 256 concurrent streaming clients against dummy:tiny.

Every request must complete (its stream ends with [DONE], each choice finishes once,
the usage chunk counts every token), no request may fail, and when all are done
every KV block is back in the pool (h2oserve:kv_cache_blocks_used 0) and nothing is
running or waiting. Bounded in count and time. TAP output.
Usage: test_load.py H2OSERVE_BINARY
"""
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Server, metric, tap, results  # noqa: E402

N_CLIENTS = 256
MAX_TOKENS = 24


async def one(port, i):
    body = json.dumps({"model": MODEL, "prompt": f"client {i} says", "max_tokens": MAX_TOKENS,
                       "stream": True, "ignore_eos": True, "seed": i,
                       "stream_options": {"include_usage": True}}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                 + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout=120)  # until the server closes
    writer.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        return f"client {i}: {head[:80]!r}"
    # De-chunk the body, then split the SSE events.
    text, pos = b"", 0
    while True:
        nl = rest.index(b"\r\n", pos)
        size = int(rest[pos:nl], 16)
        if size == 0:
            break
        text += rest[nl + 2:nl + 2 + size]
        pos = nl + 2 + size + 2
    events = [line[6:] for line in text.decode().split("\n") if line.startswith("data: ")]
    if not events or events[-1] != "[DONE]":
        return f"client {i}: stream did not end with [DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    if any("error" in c for c in chunks):
        return f"client {i}: error event"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    if finishes.count("length") != 1 or chunks[-1]["usage"]["completion_tokens"] != MAX_TOKENS:
        return f"client {i}: finishes {finishes}, usage {chunks[-1].get('usage')}"
    return None


async def run(port):
    return await asyncio.gather(*(one(port, i) for i in range(N_CLIENTS)),
                                return_exceptions=True)


def main():
    srv = Server("--max-num-seqs", "256", "--max-batched-tokens", "2048",
                 "--max-connections", "1024")
    t0 = time.time()
    outcomes = asyncio.run(run(srv.port))
    dt = time.time() - t0
    failures = [str(o) for o in outcomes if o is not None]
    tap(not failures, f"{N_CLIENTS} concurrent streams complete ({dt:.1f} s)",
        "\n".join(failures[:10]))
    time.sleep(0.2)
    used = metric(srv, "kv_cache_blocks_used")
    running = metric(srv, "num_requests_running")
    waiting = metric(srv, "num_requests_waiting")
    tap(used == 0 and running == 0 and waiting == 0, "every block back in the pool",
        (used, running, waiting))
    st, _, _ = srv.get("/health")
    tap(st == 200, "healthy after the load")
    tap(srv.stop() == 0, "server exits 0")
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
