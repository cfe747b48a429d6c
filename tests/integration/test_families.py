#!/usr/bin/env python3
"""test_families.py - every model family through the binary, as a user runs it.

- `generate --prompt-ids ... --print-ids` on each tiny transformers checkpoint of
  tests/data/golden-arch (Llama with GQA, Llama 3 rope scaling, Mistral with a
  sliding window, Qwen2, GPT-NeoX) prints exactly transformers' greedy ids
  (golden.json, from tests/data/make_golden_arch.py): the whole CLI path, loading
  included, against a reference nobody here wrote.
- The same checkpoints under H2O with a small budget still run to the end.
- `serve` on a Llama-shaped dummy answers /v1/completions (text and token prompts,
  streaming) with the same greedy text `generate` prints; a checkpoint folder
  without tokenizer files serves token-id prompts and refuses text ones.
- `run-batch` and `bench quality` run on the Llama-shaped dummy.
TAP output. Usage: test_families.py H2OSERVE_BINARY DATA_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, tap, results  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
DATA = os.path.abspath(sys.argv[2])
ARCH = os.path.join(DATA, "golden-arch")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
LLAMA_DUMMY = "dummy:llama-tiny"


def run(*args, timeout=300):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=ENV)


def compact(ids):
    return json.dumps(ids, separators=(",", ":"))


def golden_families():
    for name in sorted(os.listdir(ARCH)):
        folder = os.path.join(ARCH, name)
        with open(os.path.join(folder, "golden.json")) as f:
            yield name, folder, json.load(f)


def generate_matches_transformers():
    for name, folder, g in golden_families():
        args = []
        for p in g["prompts"]:
            args += ["--prompt-ids", compact(p["tokens"])]
        n = g["n_decode"]
        r = run("generate", "--model", folder, *args, "--max-tokens", str(n),
                "--temperature", "0", "--dtype", "fp32", "--kv-policy", "full",
                "--ignore-eos", "--print-ids")
        got = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("[")]
        want = [p["decode_tokens"][:n] for p in g["prompts"]]
        tap(r.returncode == 0 and got == want,
            f"{name}: generate --prompt-ids --print-ids gives transformers' greedy ids",
            (r.returncode, r.stderr[-400:], got[:2], want[:2]))
        # H2O with a budget well under the prompts: evicts, and still runs.
        r = run("generate", "--model", folder, *args, "--max-tokens", str(n),
                "--temperature", "0", "--dtype", "fp32", "--kv-policy", "h2o",
                "--h2o-heavy", "2", "--h2o-recent", "2", "--kv-min-budget", "0",
                "--ignore-eos", "--print-ids")
        got = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("[")]
        tap(r.returncode == 0 and len(got) == len(want) and all(len(x) == n for x in got)
            and re.search(r"\b[1-9][0-9]* tokens evicted per head", r.stderr),
            f"{name}: H2O at 2 + 2 slots runs every prompt to the end", r.stderr[-400:])


def served_llama():
    text = "The Linux kernel"
    r = run("generate", "--model", LLAMA_DUMMY, "--prompt", text, "--max-tokens", "8",
            "--temperature", "0", "--dtype", "fp32")
    want = r.stdout.rstrip("\n")
    tap(r.returncode == 0 and want, f"{LLAMA_DUMMY}: generate prints a completion",
        r.stderr[-300:])
    srv = Server(model=LLAMA_DUMMY)
    try:
        body = {"model": LLAMA_DUMMY, "prompt": text, "max_tokens": 8, "temperature": 0}
        st, data, _ = srv.post("/v1/completions", body)
        resp = json.loads(data) if st == 200 else {}
        got = resp.get("choices", [{}])[0].get("text")
        tap(st == 200 and got == want, f"{LLAMA_DUMMY}: serve gives generate's greedy text",
            (st, data[:300], want))
        st, data, _ = srv.post("/v1/completions", dict(body, stream=True))
        pieces = [json.loads(l[6:])["choices"][0]["text"] for l in data.decode().split("\n")
                  if l.startswith("data: {")]
        tap(st == 200 and "".join(pieces) == want, f"{LLAMA_DUMMY}: streamed, the same text",
            (st, data[:300]))
        st, data, _ = srv.post("/v1/completions", dict(body, prompt=[1, 40, 41, 42]))
        tap(st == 200 and json.loads(data)["usage"]["completion_tokens"] == 8,
            f"{LLAMA_DUMMY}: a token prompt", data[:300])
    finally:
        srv.stop()
    folder = os.path.join(ARCH, "tiny-qwen2")
    srv = Server(model=folder)
    try:
        mid = json.loads(srv.get("/v1/models")[1])["data"][0]["id"]
        st, data, _ = srv.post("/v1/completions", {"model": mid, "prompt": [1, 5, 9],
                                                   "max_tokens": 4, "temperature": 0,
                                                   "ignore_eos": True})
        ok = st == 200 and json.loads(data)["usage"]["completion_tokens"] == 4
        tap(ok, "tiny-qwen2 without tokenizer files: serve takes token ids", data[:300])
        st, data, _ = srv.post("/v1/completions", {"model": mid, "prompt": "hello",
                                                   "max_tokens": 4})
        err = json.loads(data).get("error", {}) if st == 400 else {}
        tap(st == 400 and err.get("param") == "prompt" and "no tokenizer" in err["message"],
            "tiny-qwen2 without tokenizer files: a text prompt is a 400 saying why", data[:300])
        tap(srv.stderr_has("token ids only"), "tiny-qwen2: the load warns it has no tokenizer")
    finally:
        srv.stop()


def batch_and_quality():
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            for i in range(3):
                f.write(json.dumps({"custom_id": f"r{i}", "method": "POST",
                                    "url": "/v1/completions",
                                    "body": {"model": LLAMA_DUMMY, "prompt": f"line {i}",
                                             "max_tokens": 4}}) + "\n")
        r = run("run-batch", "-i", inp, "-o", out, "--model", LLAMA_DUMMY, "--dtype", "fp32")
        lines = [json.loads(l) for l in open(out)] if os.path.exists(out) else []
        tap(r.returncode == 0 and len(lines) == 3
            and all(l["response"]["status_code"] == 200 for l in lines),
            f"{LLAMA_DUMMY}: run-batch answers every line", r.stderr[-300:])
        text = os.path.join(tmp, "text.txt")
        with open(text, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog. " * 40)
        r = run("bench", "quality", "--model", LLAMA_DUMMY, "--text", text, "--prompt-len",
                "48", "--gen-len", "16", "--segments", "2", "--sweep", "0.2")
        tap(r.returncode == 0 and "h2o" in r.stdout, f"{LLAMA_DUMMY}: bench quality runs",
            (r.stdout[-300:], r.stderr[-300:]))


generate_matches_transformers()
served_llama()
batch_and_quality()
print(f"1..{len(results)}")
sys.exit(0 if all(results) else 1)
