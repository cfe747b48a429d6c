#!/usr/bin/env python3
"""test_openai.py - h2oserve through the official `openai` Python package.

A client written for OpenAI's legacy Completions API must work unchanged with
base_url pointed at h2oserve. TAP output. Usage: test_openai.py H2OSERVE_BINARY
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai  # noqa: E402
from test_server import MODEL, Server, tap, results  # noqa: E402


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

    tap(srv.stop() == 0, "server exits 0")
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
