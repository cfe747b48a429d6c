#!/usr/bin/env python3
"""test_chat_clients.py - /v1/chat/completions through the clients people use.

A tiny Llama model with a real tokenizer and Llama 3's chat template (chatlib.py)
is served; the official `openai` package (plain, streaming, logprobs, an error),
LangChain's ChatOpenAI and litellm's completion() talk to it unchanged with their
base URL pointed at h2oserve. Greedy decoding, so every client must get the same
text for the same conversation. Then a chat batch through the Batches API (the
SDK's files + batches calls) and through `h2oserve run-batch`.
TAP output. Usage: test_chat_clients.py H2OSERVE_BINARY DATA_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai  # noqa: E402
from chatlib import make_tiny_llama  # noqa: E402
from test_server import Server, tap, results  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
DATA = os.path.abspath(sys.argv[2])
CONVO = [{"role": "system", "content": "You are terse."},
         {"role": "user", "content": "Name a prime number."}]


def sdk(client, mid):
    r = client.chat.completions.create(model=mid, messages=CONVO, max_tokens=8,
                                       temperature=0)
    c = r.choices[0]
    tap(r.object == "chat.completion" and r.id.startswith("chatcmpl-")
        and c.message.role == "assistant" and isinstance(c.message.content, str)
        and c.finish_reason in ("stop", "length") and r.usage.completion_tokens >= 1
        and r.usage.prompt_tokens > 10, "openai: chat.completions.create", r)
    text = c.message.content
    pieces, roles, finish, usage = [], [], None, None
    for ch in client.chat.completions.create(model=mid, messages=CONVO, max_tokens=8,
                                             temperature=0, stream=True,
                                             stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for d in ch.choices:
            if d.delta.role:
                roles.append(d.delta.role)
            if d.delta.content:
                pieces.append(d.delta.content)
            finish = d.finish_reason or finish
    tap("".join(pieces) == text and roles == ["assistant"] and finish == c.finish_reason
        and usage and usage.total_tokens == r.usage.total_tokens,
        "openai: streaming gives the same text, the role once, then usage",
        (pieces, text, roles, finish, usage))
    lp = client.chat.completions.create(model=mid, messages=CONVO, max_tokens=4,
                                        temperature=0, logprobs=True, top_logprobs=2)
    content = lp.choices[0].logprobs.content
    tap(len(content) == lp.usage.completion_tokens
        and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content),
        "openai: logprobs with top_logprobs", lp.choices[0].logprobs)
    try:
        client.chat.completions.create(model=mid, messages=CONVO, max_tokens=4, tools=[
            {"type": "function", "function": {"name": "f", "parameters": {}}}])
        tap(False, "openai: tools are refused")
    except openai.BadRequestError as e:
        tap(e.body and e.body.get("param") == "tools", "openai: tools are refused", e.body)
    return text


def tokenize_chat(srv, client, mid):
    """vLLM's /tokenize with messages: the ids /v1/chat/completions runs."""
    r = client.chat.completions.create(model=mid, messages=CONVO, max_tokens=1, temperature=0)
    st, data, _ = srv.post("/tokenize", {"model": mid, "messages": CONVO,
                                         "return_token_strs": True})
    t = json.loads(data) if st == 200 else {}
    tap(st == 200 and t.get("count") == r.usage.prompt_tokens
        and t["token_strs"][0] == "<|begin_of_text|>" and "<|eot_id|>" in t["token_strs"]
        and t["token_strs"][-3:] == ["<|end_header_id|>", "\u010a", "\u010a"],
        "/tokenize with messages: the chat prompt's ids, specials parsed",
        (st, data[:400], r.usage))


def langchain(port, mid, want):
    from langchain_openai import ChatOpenAI
    llm = ChatOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", model=mid,
                     max_tokens=8, temperature=0)
    msg = llm.invoke([("system", CONVO[0]["content"]), ("human", CONVO[1]["content"])])
    tap(msg.content == want, "langchain: ChatOpenAI.invoke gives the same text",
        (msg.content, want))
    streamed = "".join(chunk.content for chunk in llm.stream(
        [("system", CONVO[0]["content"]), ("human", CONVO[1]["content"])]))
    tap(streamed == want, "langchain: ChatOpenAI.stream gives the same text", (streamed, want))


def litellm_client(port, mid, want):
    import litellm
    r = litellm.completion(model=f"openai/{mid}", api_base=f"http://127.0.0.1:{port}/v1",
                           api_key="unused", messages=CONVO, max_tokens=8, temperature=0)
    tap(r.choices[0].message.content == want, "litellm: completion() gives the same text",
        (r.choices[0].message.content, want))


def batches(client, mid, want):
    lines = [json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                         "body": {"model": mid, "messages": CONVO, "max_tokens": 8,
                                  "temperature": 0}}) for i in range(3)]
    f = client.files.create(file=("chat.jsonl", ("\n".join(lines) + "\n").encode()),
                            purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                              completion_window="24h")
    deadline = time.time() + 120
    while b.status not in ("completed", "failed", "cancelled", "expired") and time.time() < deadline:
        time.sleep(0.1)
        b = client.batches.retrieve(b.id)
    out = []
    if b.status == "completed":
        out = [json.loads(x) for x in client.files.content(b.output_file_id).text.splitlines()]
    ok = len(out) == 3 and all(
        o["response"]["status_code"] == 200
        and o["response"]["body"]["object"] == "chat.completion"
        and o["response"]["body"]["choices"][0]["message"]["content"] == want for o in out)
    tap(ok, "a chat batch through the Batches API", (b.status, out[:1]))
    return lines


def run_batch(folder, mid, lines, want):
    with tempfile.TemporaryDirectory() as tmp:
        inp, outp = os.path.join(tmp, "in.jsonl"), os.path.join(tmp, "out.jsonl")
        with open(inp, "w") as f:
            f.write("\n".join(lines) + "\n")
        p = subprocess.run([BIN, "run-batch", "-i", inp, "-o", outp, "--model", folder,
                            "--served-model-name", mid, "--dtype", "fp32"],
                           capture_output=True, text=True, timeout=300)
        out = [json.loads(x) for x in open(outp)] if os.path.exists(outp) else []
        ok = p.returncode == 0 and len(out) == 3 and all(
            o["response"]["status_code"] == 200
            and o["response"]["body"]["choices"][0]["message"]["content"] == want for o in out)
        tap(ok, "a chat batch through run-batch", (p.returncode, p.stderr[-300:], out[:1]))


def template_sources(tmp, folder):
    """--chat-template over the folder's; a folder template this subset cannot
    compile, and a missing --chat-template file."""
    llama2 = os.path.join(DATA, "chat_templates", "llama2.jinja")
    srv = Server("--chat-template", llama2, model=folder)
    try:
        mid = json.loads(srv.get("/v1/models")[1])["data"][0]["id"]
        st, data, _ = srv.post("/v1/chat/completions", {"model": mid, "max_tokens": 2,
                                                        "messages": CONVO[1:] * 2})
        err = json.loads(data).get("error", {}) if st == 400 else {}
        tap(st == 400 and err.get("param") == "messages"
            and "Conversation roles must alternate" in err.get("message", ""),
            "--chat-template: Llama 2's template refuses two user turns in a row", data[:300])
        st, data, _ = srv.post("/v1/chat/completions", {"model": mid, "max_tokens": 2,
                                                        "messages": CONVO[1:]})
        tap(st == 200, "--chat-template: Llama 2's template renders a user turn", data[:300])
    finally:
        srv.stop()
    broken = make_tiny_llama(os.path.join(tmp, "broken"), DATA)
    with open(os.path.join(broken, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    cfg["chat_template"] = "{% for m in messages %}{{ m.content | frobnicate }}{% endfor %}"
    with open(os.path.join(broken, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    srv = Server(model=broken)
    try:
        mid = json.loads(srv.get("/v1/models")[1])["data"][0]["id"]
        st, data, _ = srv.post("/v1/chat/completions", {"model": mid, "messages": CONVO})
        tap(st == 400 and b"frobnicate" in data and b"cannot be used" in data,
            "a folder template outside the subset: chat is a 400 naming the construct", data)
        st, data, _ = srv.post("/v1/completions", {"model": mid, "prompt": "x", "max_tokens": 2})
        tap(st == 200 and srv.stderr_has("cannot be used"),
            "... while completions still serve, and the start warned", data[:200])
    finally:
        srv.stop()
    p = subprocess.run([BIN, "serve", "--model", folder, "--chat-template",
                        os.path.join(tmp, "nope.jinja"), "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    tap(p.returncode == 1 and "nope.jinja" in p.stderr,
        "a --chat-template file that is not there stops the start", p.stderr[-300:])


with tempfile.TemporaryDirectory() as tmp:
    folder = make_tiny_llama(os.path.join(tmp, "tiny-llama-chat"), DATA)
    srv = Server(model=folder)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="unused")
        mid = client.models.list().data[0].id
        want = sdk(client, mid)
        tokenize_chat(srv, client, mid)
        langchain(srv.port, mid, want)
        litellm_client(srv.port, mid, want)
        lines = batches(client, mid, want)
    finally:
        srv.stop()
    run_batch(folder, mid, lines, want)
    template_sources(tmp, folder)
print(f"1..{len(results)}")
sys.exit(0 if all(results) else 1)
