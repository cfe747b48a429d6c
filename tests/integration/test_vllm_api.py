#!/usr/bin/env python3
"""test_vllm_api.py - the endpoints a vLLM user reaches for, on the real binary.

POST /tokenize, POST /detokenize, GET /version and POST /v1/chat/completions (a 400:
no chat template), over real HTTP, on two models: dummy:tiny (the byte tokenizer)
and the built-in `default` (no --model; a real byte-level BPE). /tokenize must agree
with what /v1/completions counts as usage.prompt_tokens and with `h2oserve tokenize`;
token_strs must be the vocabulary's own spelling (vocab.json, as vLLM's
convert_ids_to_tokens); /detokenize must invert /tokenize for ASCII and multi-byte
UTF-8. Bad input gets a 400/404 with OpenAI's error body and leaves the server up;
the API key guards /v1 only (as vLLM's --api-key); a tokens array up to the body
limit is fine. TAP output. Usage: test_vllm_api.py H2OSERVE_BINARY
"""
import json
import os
import re
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, healthy, read_until, results, tap  # noqa: E402

BIN = sys.argv[1]
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CHAT_WORDS = "no chat template"

TEXTS = [
    "The Linux kernel schedules tasks.",
    "h\u00e9llo w\u00f6rld \u2192 \u4e16\u754c \U0001F389",  # 2-, 3- and 4-byte characters
    'quote " backslash \\ newline\ntab\t</s> end',
]


def post(srv, path, body, **kw):
    st, data, _ = srv.post(path, body, **kw)
    try:
        return st, json.loads(data)
    except ValueError:
        return st, data


def is_error(st, r, status, param="any", code="any", words=None):
    """r is OpenAI's error body {"error":{message,type,param,code}} with status."""
    if st != status or not isinstance(r, dict) or set(r) != {"error"}:
        return False
    e = r["error"]
    if set(e) != {"message", "type", "param", "code"} or not isinstance(e["message"], str):
        return False
    if e["type"] != "invalid_request_error":
        return False
    if param != "any" and e["param"] != param:
        return False
    if code != "any" and e["code"] != code:
        return False
    return words is None or words in e["message"]


def cli_tokenize(model, text):
    args = [BIN, "tokenize"] + (["--model", model] if model else []) + ["--text", text]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else out.stderr


def check_model(model, vocab_names):
    """Everything per model: `model` is the --model value (None: the default)."""
    srv = Server(model=model)
    mid = model or "default"
    tag = f"[{mid}]"
    st, data, _ = srv.get("/v1/models")
    max_len = json.loads(data)["data"][0]["max_model_len"]

    for text in TEXTS:
        short = repr(text[:24])
        st, r = post(srv, "/tokenize", {"model": mid, "prompt": text})
        ok = (st == 200 and set(r) == {"count", "max_model_len", "tokens", "token_strs"}
              and r["token_strs"] is None and r["count"] == len(r["tokens"])
              and r["max_model_len"] == max_len and r["tokens"][0] == 2)
        tap(ok, f"{tag} /tokenize {short}: count, max_model_len, BOS first, no token_strs", r)
        if st != 200:
            continue
        ids = r["tokens"]
        cli = cli_tokenize(model, text)
        tap(cli == ids, f"{tag} /tokenize {short} == h2oserve tokenize", (ids, cli))
        st, c = post(srv, "/v1/completions", {"model": mid, "prompt": text, "max_tokens": 1})
        tap(st == 200 and c["usage"]["prompt_tokens"] == len(ids),
            f"{tag} /tokenize {short} counts what /v1/completions counts", (len(ids), c))
        st, r2 = post(srv, "/tokenize", {"prompt": text, "add_special_tokens": False,
                                         "return_token_strs": True})
        ok = (st == 200 and r2["tokens"] == ids[1:] and r2["count"] == len(ids) - 1
              and len(r2["token_strs"]) == len(r2["tokens"])
              and all(isinstance(s, str) for s in r2["token_strs"]))
        tap(ok, f"{tag} add_special_tokens false drops the BOS; token_strs as long", r2)
        if st != 200:
            continue
        if vocab_names is not None:
            want = [vocab_names.get(i) for i in r2["tokens"]]
            tap(r2["token_strs"] == want,
                f"{tag} token_strs spell the vocabulary (vocab.json)", (r2["token_strs"], want))
        st, d = post(srv, "/detokenize", {"model": mid, "tokens": r2["tokens"]})
        tap(st == 200 and d == {"prompt": text}, f"{tag} /detokenize inverts {short}", d)
        st, d = post(srv, "/detokenize", {"tokens": ids})
        tap(st == 200 and d == {"prompt": "</s>" + text},
            f"{tag} /detokenize writes the BOS as </s>", d)

    st, r = post(srv, "/tokenize", {"prompt": "Hi", "return_token_strs": True})
    tap(st == 200 and r["token_strs"][0] == "</s>", f"{tag} token_strs name BOS </s>", r)

    # --- bad input: OpenAI's error body, and the server stays up
    bad = [
        ("/tokenize", b"not json", 400, None),
        ("/tokenize", b'{"prompt": "x"', 400, None),
        ("/tokenize", b"[1, 2]", 400, None),
        ("/tokenize", {}, 400, "prompt"),
        ("/tokenize", {"prompt": 5}, 400, "prompt"),
        ("/tokenize", {"prompt": ["a"]}, 400, "prompt"),
        ("/tokenize", {"prompt": "x", "add_special_tokens": "yes"}, 400, "add_special_tokens"),
        ("/tokenize", {"prompt": "x", "return_token_strs": 1}, 400, "return_token_strs"),
        ("/detokenize", b"not json", 400, None),
        ("/detokenize", {}, 400, "tokens"),
        ("/detokenize", {"tokens": "5"}, 400, "tokens"),
        ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
        ("/detokenize", {"tokens": [10 ** 9]}, 400, "tokens"),
        ("/detokenize", {"tokens": [5, 1.5]}, 400, "tokens"),
        ("/detokenize", {"tokens": [5, "x"]}, 400, "tokens"),
        ("/detokenize", {"tokens": [2 ** 70]}, 400, "tokens"),
    ]
    for path, body, status, param in bad:
        st, r = post(srv, path, body)
        tap(is_error(st, r, status, param=param) and healthy(srv),
            f"{tag} {path} {str(body)[:40]}: {status} param {param}, still up", (st, r))
    for path, body in [("/tokenize", {"model": "nope", "prompt": "x"}),
                       ("/detokenize", {"model": "nope", "tokens": [5]})]:
        st, r = post(srv, path, body)
        tap(is_error(st, r, 404, param="model", code="model_not_found"),
            f"{tag} {path} with another model: 404 model_not_found", r)
    st, r = post(srv, "/tokenize", {"model": mid, "messages": [{"role": "user", "content": "hi"}]})
    tap(is_error(st, r, 400, words=CHAT_WORDS), f"{tag} /tokenize chat form: no chat template", r)
    for path, method in [("/tokenize", "GET"), ("/detokenize", "GET"), ("/version", "POST")]:
        st, data, _ = srv.request(method, path, b"{}" if method == "POST" else None)
        tap(st == 405, f"{tag} {method} {path}: 405", data)

    # --- /version: meson's project version, as h2oserve --version says
    st, data, _ = srv.get("/version")
    r = json.loads(data) if st == 200 else data
    cli = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.split()
    with open(os.path.join(ROOT, "meson.build")) as f:
        meson_version = re.search(r"version:\s*'([^']+)'", f.read()).group(1)
    tap(st == 200 and r == {"version": meson_version} and cli == ["h2oserve", meson_version],
        f"{tag} GET /version == h2oserve --version == meson's version", (r, cli, meson_version))

    # --- chat completions: 400, no chat template
    chat = {"model": mid, "messages": [{"role": "user", "content": "Hello"}]}
    st, r = post(srv, "/v1/chat/completions", chat)
    tap(is_error(st, r, 400, param=None, code=None, words=CHAT_WORDS)
        and "transformers v4.44" in r["error"]["message"],
        f"{tag} POST /v1/chat/completions: 400 no chat template", r)
    st, r = post(srv, "/v1/chat/completions", b"{not json")
    tap(is_error(st, r, 400, words="JSON"), f"{tag} chat: a body that is not JSON is a 400", r)
    st, r = post(srv, "/v1/chat/completions", dict(chat, model="nope"))
    tap(is_error(st, r, 404, code="model_not_found"), f"{tag} chat: another model is a 404", r)
    st, data, _ = srv.get("/v1/chat/completions")
    tap(st == 405, f"{tag} GET /v1/chat/completions: 405", data)
    tap(healthy(srv), f"{tag} still healthy after all of it")
    rc = srv.stop()
    tap(rc == 0, f"{tag} server exits 0", "".join(srv.log[-20:]))


def check_key_and_limits():
    """--api-key guards /v1 only; a tokens array up to --max-body-bytes is fine."""
    limit = 4 << 20
    srv = Server("--api-key", "sk-test", "--max-body-bytes", str(limit))
    key = {"Authorization": "Bearer sk-test"}
    chat = {"model": "dummy:tiny", "messages": [{"role": "user", "content": "Hello"}]}
    st, r = post(srv, "/v1/chat/completions", chat)
    tap(st == 401 and r["error"]["code"] == "invalid_api_key", "chat without the key: 401", r)
    st, r = post(srv, "/v1/chat/completions", chat, headers={"Authorization": "Bearer no"})
    tap(st == 401, "chat with a wrong key: 401", r)
    st, data, _ = srv.get("/v1/chat/completions")
    tap(st == 401, "GET chat without the key: 401 (the key comes first)", data)
    st, r = post(srv, "/v1/chat/completions", chat, headers=key)
    tap(is_error(st, r, 400, words=CHAT_WORDS), "chat with the key: 400 no chat template", r)
    st, r = post(srv, "/tokenize", {"prompt": "Hi"})
    tap(st == 200 and r["tokens"] == [2, 76, 109], "/tokenize needs no key (vLLM: /v1 only)", r)
    st, r = post(srv, "/detokenize", {"tokens": [76, 109]})
    tap(st == 200 and r == {"prompt": "Hi"}, "/detokenize needs no key", r)
    st, data, _ = srv.get("/version")
    tap(st == 200, "/version needs no key", data)
    st, data, _ = srv.get("/v1/models")
    tap(st == 401, "/v1/models still needs it", data)

    # A tokens array that fills the body limit, and one just past it.
    n = (limit - 64) // 4  # "101," per id
    body = '{"tokens":[' + ",".join(str(4 + 97 + i % 26) for i in range(n)) + "]}"
    assert len(body) <= limit
    st, r = post(srv, "/detokenize", body)
    tap(st == 200 and len(r["prompt"]) == n and r["prompt"][:3] == "abc",
        f"/detokenize of {n} ids ({len(body)} bytes, the limit is {limit})",
        (st, str(r)[:200]))
    # Past the limit the HTTP layer answers from Content-Length alone, and closes.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /detokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
              % (limit + 1))
    resp = read_until(s, lambda d: b"\r\n\r\n" in d, 10)
    s.close()
    tap(resp.startswith(b"HTTP/1.1 413") and healthy(srv),
        "/detokenize past the body limit: 413, still up", resp[:200])
    text = "x" * (limit - 64)
    st, r = post(srv, "/tokenize", {"prompt": text, "return_token_strs": True})
    tap(st == 200 and r["count"] == len(text) + 1 and len(r["token_strs"]) == len(text) + 1,
        f"/tokenize of a {len(text)}-byte prompt with token_strs: all of a response "
        "past --write-queue-max-bytes reaches a reader", (st, str(r)[:200]))
    rc = srv.stop()
    tap(rc == 0, "api-key server exits 0", "".join(srv.log[-20:]))


def main():
    # dummy:tiny's byte tokenizer names bytes by their text: no vocab.json to check.
    check_model("dummy:tiny", None)
    with open(os.path.join(ROOT, "models", "default", "vocab.json"), encoding="utf-8") as f:
        names = {i: s for s, i in json.load(f).items()}
    check_model(None, names)
    check_key_and_limits()
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
