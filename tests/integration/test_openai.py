#!/usr/bin/env python3
"""test_openai.py - h2oserve through the official `openai` Python package.

A client written for OpenAI's legacy Completions API must work unchanged with
base_url pointed at h2oserve. TAP output. Usage: test_openai.py H2OSERVE_BINARY
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai  # noqa: E402
from test_server import MODEL, Server, tap, results  # noqa: E402


def batch_flow(client):
    """The Batch API as OpenAI's cookbook uses it: upload, create, poll, download."""
    lines = [json.dumps({"custom_id": f"task-{i}", "method": "POST", "url": "/v1/completions",
                         "body": {"model": MODEL, "prompt": f"item {i}", "max_tokens": 5,
                                  "temperature": 0}}) for i in range(12)]
    f = client.files.create(file=("tasks.jsonl", ("\n".join(lines) + "\n").encode()),
                            purpose="batch")
    tap(f.id.startswith("file-") and f.purpose == "batch" and f.filename == "tasks.jsonl"
        and f.status == "processed", "files.create", f)
    tap(client.files.retrieve(f.id).bytes == f.bytes, "files.retrieve", f)
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/completions",
                              completion_window="24h", metadata={"who": "sdk"})
    tap(b.status == "validating" and b.metadata == {"who": "sdk"}, "batches.create", b)
    deadline = time.time() + 120
    while b.status not in ("completed", "failed", "cancelled", "expired") and time.time() < deadline:
        time.sleep(0.1)
        b = client.batches.retrieve(b.id)
    tap(b.status == "completed" and b.request_counts.completed == 12
        and b.request_counts.failed == 0 and b.output_file_id, "batches.retrieve until completed", b)
    text = client.files.content(b.output_file_id).text
    out = [json.loads(x) for x in text.splitlines()]
    tap(sorted(o["custom_id"] for o in out) == sorted(f"task-{i}" for i in range(12))
        and all(o["response"]["status_code"] == 200 for o in out), "files.content", text[:300])
    page = client.batches.list(limit=1)
    tap([x.id for x in page.data] == [b.id], "batches.list", page)
    listed = [x.id for x in client.files.list(purpose="batch")]
    tap(f.id in listed, "files.list", listed)
    long = [json.dumps({"custom_id": f"long-{i}", "method": "POST", "url": "/v1/completions",
                        "body": {"model": MODEL, "prompt": "x", "max_tokens": 64,
                                 "ignore_eos": True}}) for i in range(300)]
    f2 = client.files.create(file=("long.jsonl", "\n".join(long).encode()), purpose="batch")
    b2 = client.batches.create(input_file_id=f2.id, endpoint="/v1/completions",
                               completion_window="24h")
    c = client.batches.cancel(b2.id)
    tap(c.status == "cancelling", "batches.cancel", c)
    while c.status == "cancelling" and time.time() < deadline:
        time.sleep(0.05)
        c = client.batches.retrieve(b2.id)
    tap(c.status == "cancelled" and c.request_counts.completed < 300, "then cancelled", c)
    d = client.files.delete(f.id)
    tap(d.deleted and d.id == f.id, "files.delete", d)
    try:
        client.files.retrieve(f.id)
        tap(False, "deleted file raises NotFoundError")
    except openai.NotFoundError as e:
        tap(e.status_code == 404, "deleted file raises NotFoundError", e)


def main():
    srv = Server("--api-key", "sekret")
    base = f"http://127.0.0.1:{srv.port}/v1"
    client = openai.OpenAI(base_url=base, api_key="sekret", max_retries=0, timeout=60)

    models = client.models.list()
    tap([m.id for m in models.data] == [MODEL], "models.list", models)
    m = client.models.retrieve(MODEL)
    tap(m.id == MODEL, "models.retrieve", m)

    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    tap(r.object == "text_completion" and len(r.choices) == 1 and r.usage.completion_tokens == 8
        and r.choices[0].finish_reason == "length", "completions.create", r)

    r = client.completions.create(model=MODEL, prompt=["a", "b"], n=2, max_tokens=3, seed=5,
                                  logprobs=1, echo=True, extra_body={"ignore_eos": True})
    ok = [c.index for c in r.choices] == [0, 1, 2, 3] and all(
        c.text.startswith(p) and c.logprobs is not None for c, p in zip(r.choices, "aabb"))
    tap(ok, "several prompts, n, seed, logprobs, echo", r)

    r2 = client.completions.create(model=MODEL, prompt=["a", "b"], n=2, max_tokens=3, seed=5,
                                   logprobs=1, echo=True, extra_body={"ignore_eos": True})
    tap([c.text for c in r.choices] == [c.text for c in r2.choices], "seed reproduces", r2)

    stream = client.completions.create(model=MODEL, prompt="Hello", max_tokens=6, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    tap(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6
        and chunks[-2].choices[0].finish_reason == "length" and isinstance(text, str),
        "streaming with include_usage", chunks[-3:])

    try:
        client.completions.create(model="nope", prompt="x")
        tap(False, "unknown model raises NotFoundError")
    except openai.NotFoundError as e:
        tap(e.status_code == 404, "unknown model raises NotFoundError", e)
    try:
        client.completions.create(model=MODEL, prompt="x", max_tokens=100000)
        tap(False, "context length raises BadRequestError")
    except openai.BadRequestError as e:
        tap(e.code == "context_length_exceeded", "context length raises BadRequestError", e)
    bad = openai.OpenAI(base_url=base, api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        tap(False, "wrong key raises AuthenticationError")
    except openai.AuthenticationError as e:
        tap(e.status_code == 401, "wrong key raises AuthenticationError", e)

    batch_flow(client)
    tap(srv.stop() == 0, "server exits 0")
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
