#!/usr/bin/env python3
"""test_run_batch.py - `h2oserve run-batch -i in.jsonl -o out.jsonl`.

One output line per input line, in input order; good lines answered 200 with a
completion, bad lines (not JSON, duplicate custom_id, wrong method or url, wrong
model, invalid body, stream) answered with an error and the job goes on; seeded and
greedy lines give the same output run after run. TAP output.
Usage: test_run_batch.py H2OSERVE_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = sys.argv[1]
MODEL = "dummy:tiny"
results = []


def tap(ok, name, detail=""):
    results.append(ok)
    print(("ok" if ok else "not ok") + f" {len(results)} - {name}")
    if not ok and detail:
        for line in str(detail).splitlines()[:20]:
            print("# " + line)


def line(cid, body, method="POST", url="/v1/completions"):
    return json.dumps({"custom_id": cid, "method": method, "url": url, "body": body})


def run(tmp, lines, *extra):
    inp, out = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
    with open(inp, "w") as f:
        f.write("\n".join(lines) + "\n")
    p = subprocess.run([BIN, "run-batch", "-i", inp, "-o", out, "--model", MODEL, "--dtype",
                        "fp32", *extra], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    outs = []
    if os.path.exists(out):
        with open(out) as f:
            outs = [json.loads(l) for l in f if l.strip()]
    return p, outs


def main():
    with tempfile.TemporaryDirectory() as tmp:
        good = {"model": MODEL, "prompt": "Hello", "max_tokens": 6, "temperature": 0,
                "ignore_eos": True}
        lines = [
            line("a", good),
            line("b", {"model": MODEL, "prompt": ["x", "y"], "n": 2, "max_tokens": 3,
                       "seed": 1, "ignore_eos": True}),
            "not json",
            line("a", good),                              # duplicate custom_id
            line("c", good, method="GET"),
            line("d", good, url="/v1/embeddings"),
            line("e", dict(good, model="other")),
            line("f", dict(good, stream=True)),
            line("g", dict(good, temperature=9)),
            line("h", dict(good, prompt="last")),
        ]
        p, outs = run(tmp, lines)
        tap(p.returncode == 0 and len(outs) == len(lines), "one output line per input line",
            (p.returncode, p.stderr[-500:], len(outs)))
        ids = [o.get("custom_id") for o in outs]
        tap(ids == ["a", "b", None, "a", "c", "d", "e", "f", "g", "h"], "input order", ids)
        ok = lambda o: o["response"] and o["response"]["status_code"] == 200 and o["error"] is None
        tap(ok(outs[0]) and ok(outs[1]) and ok(outs[9])
            and outs[0]["response"]["body"]["usage"]["completion_tokens"] == 6
            and len(outs[1]["response"]["body"]["choices"]) == 4, "good lines answered 200", outs[:2])
        codes = [o["error"]["code"] if o["error"] else o["response"]["status_code"] for o in outs[2:9]]
        # A chat line is read as chat (url per line, as vLLM's run_batch): this model
        # has no chat template, so its response is that 400.
        p_chat, outs_chat = run(tmp, [line("chat", {"model": MODEL, "messages": [
            {"role": "user", "content": "hi"}]}, url="/v1/chat/completions")])
        r_chat = outs_chat[0]["response"] if outs_chat else None
        tap(r_chat and r_chat["status_code"] == 400
            and "no chat template" in r_chat["body"]["error"]["message"],
            "a chat line without a chat template answers the chat endpoint's 400", outs_chat)
        tap(codes == ["invalid_json", "duplicate_custom_id", "invalid_method", "invalid_url",
                      404, 400, 400], "bad lines answered with their errors", codes)
        tap("10 lines, 3 ok, 7 failed" in p.stderr, "summary on stderr", p.stderr[-300:])
        p2, outs2 = run(tmp, lines)
        strip = lambda o: [x["response"]["body"]["choices"] for x in o if x["response"]
                           and x["response"]["status_code"] == 200]
        tap(strip(outs) == strip(outs2), "seeded and greedy lines reproduce", (strip(outs), strip(outs2)))

        many = [line(f"r{i}", {"model": MODEL, "prompt": f"request {i}", "max_tokens": 8,
                               "temperature": 0, "ignore_eos": True}) for i in range(300)]
        p, outs = run(tmp, many, "--max-num-seqs", "32")
        tap(p.returncode == 0 and [o["custom_id"] for o in outs] == [f"r{i}" for i in range(300)]
            and all(ok(o) for o in outs), "300 lines, all answered in order", p.stderr[-300:])

        p = subprocess.run([BIN, "run-batch", "-i", os.path.join(tmp, "nope.jsonl"), "-o",
                            os.path.join(tmp, "o.jsonl"), "--model", MODEL],
                           capture_output=True, text=True, timeout=60)
        tap(p.returncode == 1 and "nope.jsonl" in p.stderr, "missing input file: clear error", p.stderr)
        p = subprocess.run([BIN, "run-batch", "-i", "x"], capture_output=True, text=True, timeout=60)
        tap(p.returncode == 2 and "-o" in p.stderr, "missing -o: usage error", p.stderr)
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
