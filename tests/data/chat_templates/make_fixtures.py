#!/usr/bin/env python3
"""make_fixtures.py - render every chat template here with transformers, for test_chat_template.

Run once in a venv (requirements-chat.txt):
    /usr/bin/python3 -m venv /tmp/chatvenv
    /tmp/chatvenv/bin/pip install -r tests/data/chat_templates/requirements-chat.txt
    /tmp/chatvenv/bin/python tests/data/chat_templates/make_fixtures.py
It writes expected.json: for each template (*.jinja, SOURCES.md says where each came from)
and each conversation below, the string transformers' render_jinja_template (the code
apply_chat_template(tokenize=False) runs) gives, or the error it raises. The clock is
fixed (strftime_now sees NOW in UTC) so that Llama 3.2's date is reproducible; the C
test renders with the same instant.
"""
import datetime as dt
import json
import os
import pathlib

os.environ["TZ"] = "UTC"
import time

time.tzset()

import transformers
from transformers.utils import chat_template_utils as ctu

NOW = 1736942400  # 2025-01-15 12:00:00 UTC: not Llama 3.1's default date


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime.fromtimestamp(NOW, tz)


ctu.datetime = FixedDatetime  # strftime_now looks the name up when it is called

HERE = pathlib.Path(__file__).parent

# token strings per template (as each model's tokenizer_config.json names them)
TOKENS = {
    "llama2": ("<s>", "</s>"),
    "llama3": ("<|begin_of_text|>", "<|end_of_text|>"),
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "mistral-v0.1": ("<s>", "</s>"),
    "mistral-v0.3": ("<s>", "</s>"),
    "mixtral": ("<s>", "</s>"),
    "qwen2": (None, "<|im_end|>"),
    "qwen2.5": (None, "<|im_end|>"),
    "phi3": ("<s>", "<|endoftext|>"),
    "tinyllama": ("<s>", "</s>"),
    "zephyr": ("<s>", "</s>"),
}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello, how are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thanks. How can I help?"}
U2 = {"role": "user", "content": "Write a haiku about C."}
TRICKY = {
    "role": "user",
    "content": "Grüße, 世界 😀 \"double\" and 'single' quotes\n  line two\ttab \\ back\n\n",
}
A_TRICKY = {"role": "assistant", "content": "  {{ not jinja }} {% raw %} <s> </s>\n"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
U_WEATHER = {"role": "user", "content": "What's the weather in Zürich?"}
A_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "call12345", "type": "function",
                    "function": {"name": "get_weather",
                                 "arguments": {"city": "Zürich", "unit": "celsius"}}}],
}
T_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
            "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}

# templates whose models take tools; only they get the tool conversations
TOOL_TEMPLATES = {"llama3.1", "llama3.2", "qwen2.5", "mistral-v0.3"}
TOOL_CONVERSATIONS = [
    ("tools", [SYS, U_WEATHER], True),
    ("tools_no_system", [U_WEATHER], True),
    ("tool_call_round", [U_WEATHER, A_CALL, T_RESULT], True),
]

CONVERSATIONS = [
    ("user", [U1], True),
    ("user_no_prompt", [U1], False),
    ("system_user", [SYS, U1], True),
    ("multi_turn", [SYS, U1, A1, U2], True),
    ("multi_turn_no_system", [U1, A1, U2], False),
    ("assistant_last", [U1, A1], False),
    ("assistant_last_system", [SYS, U1, A1], False),
    ("tricky_text", [TRICKY, A_TRICKY, U2], True),
    ("empty_content", [{"role": "user", "content": ""}], True),
    ("not_alternating", [U1, U2], True),
    ("assistant_first", [A1, U1], True),
    ("two_systems", [SYS, SYS, U1], True),
]


def main():
    out = {"transformers": transformers.__version__, "now": NOW, "cases": []}
    for path in sorted(HERE.glob("*.jinja")):
        name = path.stem
        src = path.read_text(encoding="utf-8")
        bos, eos = TOKENS[name]
        convs = [(c, m, a, None) for c, m, a in CONVERSATIONS]
        if name in TOOL_TEMPLATES:
            convs += [(c, m, a, [WEATHER_TOOL]) for c, m, a in TOOL_CONVERSATIONS]
        for conv_name, msgs, agp, tools in convs:
            case = {"template": path.name, "name": conv_name, "messages": msgs,
                    "add_generation_prompt": agp, "bos_token": bos, "eos_token": eos}
            if tools:
                case["tools"] = tools
            try:
                # transformers passes only the special tokens a tokenizer has: with no
                # BOS (Qwen2) bos_token is undefined in the template, not None.
                toks = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v}
                rendered, _ = ctu.render_jinja_template(
                    conversations=[msgs], chat_template=src, add_generation_prompt=agp, tools=tools,
                    **toks)
                case["expected"] = rendered[0]
            except Exception as e:  # raise_exception, or a template bug on this input
                case["error"] = str(e)
                # TemplateError: raise_exception's message, which the C side must give
                # too; anything else (a TypeError on None content) need only fail
                case["error_type"] = type(e).__name__
            out["cases"].append(case)
    (HERE / "expected.json").write_text(
        json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
