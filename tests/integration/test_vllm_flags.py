#!/usr/bin/env python3
"""test_vllm_flags.py - a vLLM command line against the real h2oserve binary.

`h2oserve serve dummy:tiny --tensor-parallel-size 1 --max-num-batched-tokens 512
--max-model-len 64 --dtype float32` (the model positional, vLLM's flag names and
dtype name) must start and serve with a context of 64 tokens: /v1/models says 64, a
completion whose prompt + max_tokens passes 64 gets 400 context_length_exceeded, one
under it runs, and the default KV pool is sized for 64-token sequences. A
--max-model-len past the model's 2048 positions refuses to start;
--dtype float16 on the CPU starts with a warning and serves; the positional and
--model disagreeing, or two positionals, are usage errors (exit 2); run-batch takes
the same flags. TAP output. Usage: test_vllm_flags.py H2OSERVE_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import BIN, Server as _Server, tap, results  # noqa: E402

MODEL = "dummy:tiny"
ENV = dict(os.environ, OMP_NUM_THREADS="1")


class Server(_Server):
    """`h2oserve serve ARGS --port 0 --data-dir TMP`: the command line as given, no
    --model or other flags of the test harness's own."""

    def __init__(self, *args):
        super().__init__(*args, defaults=False)

    def request(self, method, path, body=None):
        st, data, _ = super().request(method, path, body)
        try:
            return st, json.loads(data)
        except ValueError:
            return st, data


def completion(srv, prompt_ids, max_tokens):
    """A completion of a token-id prompt: its length is exact, whatever the tokenizer."""
    return srv.request("POST", "/v1/completions",
                       {"model": MODEL, "prompt": prompt_ids, "max_tokens": max_tokens,
                        "temperature": 0, "ignore_eos": True})


def refused(args, timeout=60):
    """Run a command that must not start; returns (exit code, stderr)."""
    with tempfile.TemporaryDirectory(prefix="h2oserve-vllm-") as d:
        try:
            p = subprocess.run([BIN, *args, "--port", "0", "--data-dir", d], env=ENV,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired as e:
            return None, "still running after %d s: %s" % (timeout, e.stderr)
    return p.returncode, p.stderr


def main():
    # --- vLLM's command line, as `vllm serve` takes it
    srv = Server(MODEL, "--tensor-parallel-size", "1", "--max-num-batched-tokens", "512",
                 "--max-model-len", "64", "--dtype", "float32")
    st, body = srv.request("GET", "/v1/models")
    ok = st == 200 and [m.get("max_model_len") for m in body.get("data", [])] == [64]
    tap(ok and body["data"][0]["id"] == MODEL, "positional model; /v1/models max_model_len 64",
        body)
    st, body = srv.request("GET", "/v1/models/" + MODEL)
    tap(st == 200 and body.get("max_model_len") == 64, "/v1/models/{id} max_model_len 64",
        body)
    st, body = completion(srv, [100] * 40, 25)
    err = body.get("error", {}) if isinstance(body, dict) else {}
    tap(st == 400 and err.get("code") == "context_length_exceeded" and "64" in err["message"],
        "40 prompt + 25 max_tokens > 64: 400 context_length_exceeded", body)
    st, body = completion(srv, [100] * 40, 24)
    u = body.get("usage", {}) if st == 200 else {}
    ok = st == 200 and (u.get("prompt_tokens"), u.get("completion_tokens"),
                        u.get("total_tokens")) == (40, 24, 64)
    tap(ok, "40 prompt + 24 max_tokens = 64: runs", body)
    st, body = completion(srv, [100] * 65, 0)
    tap(st == 400, "a 65-token prompt alone is too long", body)
    # The default pool: max_num_seqs (256) sequences of 64 tokens, 4 blocks of 16 each,
    # not 256 x 2048 tokens of the model's own context.
    tap(srv.stderr_has("KV pool 1024 blocks of 16 tokens"),
        "the default KV pool holds 256 sequences of max_model_len", "".join(srv.log))
    tap(not srv.stderr_has("warn", wait=0.5), "float32 on the CPU: no dtype warning",
        "".join(srv.log))
    tap(srv.stop() == 0, "vLLM-flags server exits 0")

    # --- a context the model does not have: refused at startup, saying why
    rc, err = refused(["serve", MODEL, "--max-model-len", "4096"])
    tap(rc not in (0, None) and "max_model_len 4096" in err and "2048" in err,
        "--max-model-len 4096 > dummy:tiny's 2048: refuses to start", (rc, err))

    # --- float16 on the CPU: a warning, then bf16 (fp32 without AVX512-BF16)
    srv = Server(MODEL, "--dtype", "float16", "--device", "cpu")
    tap(srv.stderr_has("fp16 is not supported by the CPU backend"),
        "--dtype float16 on the CPU: the warning in stderr", "".join(srv.log))
    tap(srv.stderr_has("(cpu, bf16)") or srv.stderr_has("(cpu, fp32)"),
        "float16 on the CPU runs bf16 or fp32", "".join(srv.log))
    st, body = completion(srv, [100] * 5, 4)
    tap(st == 200 and body["usage"]["completion_tokens"] == 4, "float16 server serves", body)
    tap(srv.stop() == 0, "float16 server exits 0")

    # --- usage errors: exit 2 with a message, before anything loads
    rc, err = refused(["serve", MODEL, "--model", "dummy:opt-125m"])
    tap(rc == 2 and "given twice" in err and "dummy:opt-125m" in err and MODEL in err,
        "positional and --model differ: exit 2", (rc, err))
    rc, err = refused(["serve", MODEL, "extra"])
    tap(rc == 2 and "unexpected argument 'extra'" in err, "two positionals: exit 2", (rc, err))
    rc, err = refused(["serve", MODEL, "--tensor-parallel-size", "0"])
    tap(rc == 2 and "--tensor-parallel-size" in err, "a bad alias value names the alias",
        (rc, err))
    rc, err = refused(["serve", MODEL, "--dtype", "float8"])
    tap(rc == 2 and "float16" in err and "fp16" in err, "a bad dtype lists the names",
        (rc, err))
    p = subprocess.run([BIN, "serve", "--help"], capture_output=True, text=True, env=ENV)
    tap(p.returncode == 0 and "usage: h2oserve serve [MODEL] [options]" in p.stdout
        and "--tensor-parallel N (alias --tensor-parallel-size)" in p.stdout
        and "--max-model-len N" in p.stdout, "serve --help shows MODEL and the aliases",
        p.stdout[:600])

    # --- run-batch shares the table: the same flags, the same context limit
    with tempfile.TemporaryDirectory(prefix="h2oserve-vllm-") as d:
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w") as f:
            for cid, mt in (("long", 25), ("fits", 24)):
                f.write(json.dumps({"custom_id": cid, "method": "POST",
                                    "url": "/v1/completions",
                                    "body": {"model": MODEL, "prompt": [100] * 40,
                                             "max_tokens": mt, "ignore_eos": True}}) + "\n")
        p = subprocess.run([BIN, "run-batch", MODEL, "-i", inp, "-o", out,
                            "--max-model-len", "64", "--dtype", "float32",
                            "--max-num-batched-tokens", "512"],
                           capture_output=True, text=True, env=ENV, timeout=120)
        lines = []
        if os.path.exists(out):
            with open(out) as f:
                lines = [json.loads(l) for l in f if l.strip()]
        codes = [l["response"]["status_code"] if l.get("response") else None for l in lines]
        tap(p.returncode == 0 and codes == [400, 200],
            "run-batch MODEL --max-model-len 64: 65 tokens 400, 64 tokens 200",
            (p.returncode, p.stderr, lines))

    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
