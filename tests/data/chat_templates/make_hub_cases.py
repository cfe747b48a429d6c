#!/usr/bin/env python3
"""make_hub_cases.py - more real chat templates, for test_jinja's breadth check.

The @huggingface/jinja port tests itself against 45 templates copied from hub repos
(Cohere, DeepSeek, Qwen 1.5 to 3.5, Hermes, Gemma-based Zephyr, SmolLM3, Kimi, GLM, ...)
with a conversation each: packages/jinja/test/e2e.test.js of huggingface/huggingface.js
(commit ee92cdbe6f08eddd24888204853c2510028c588e here). This takes the templates and
their variables from that file (node evaluates its object literals), renders each with
transformers' environment and writes hub_cases.json in jinja_cases.json's format.
test_jinja.c requires each to render identically, or to be refused by name (a construct
outside the subset), never to render differently.

Usage: /tmp/chatvenv/bin/python make_hub_cases.py PATH/TO/huggingface.js
"""
import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
import time

from transformers.utils import chat_template_utils as ctu

NOW = 1736942400
HERE = pathlib.Path(__file__).parent

EXTRACT = r"""
const fs = require("fs");
let src = fs.readFileSync(process.argv[1], "utf8").replace(/^import .*$/mg, "");
src = src.slice(0, src.indexOf("describe(")).replace(/export const/g, "const");
src += "\nmodule.exports = {TEST_CUSTOM_TEMPLATES};";
const m = new module.constructor();
m._compile(src, "e2e.js");
const out = [];
for (const [k, v] of Object.entries(m.exports.TEST_CUSTOM_TEMPLATES))
    out.push({name: k, template: v.chat_template, vars: v.data});
process.stdout.write(JSON.stringify(out));
"""


def main():
    e2e = pathlib.Path(sys.argv[1]) / "packages/jinja/test/e2e.test.js"
    cases_in = json.loads(subprocess.run(["node", "-e", EXTRACT, str(e2e)], check=True,
                                         capture_output=True, text=True).stdout)
    os.environ["TZ"] = "UTC"
    time.tzset()

    class FixedDatetime(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime.fromtimestamp(NOW, tz)

    ctu.datetime = FixedDatetime
    cases = []
    for c in cases_in:
        case = {"name": c["name"], "template": c["template"], "vars": c["vars"]}
        try:
            case["expected"] = ctu._compile_jinja_template(c["template"]).render(**c["vars"])
        except Exception as e:
            case["error_type"] = type(e).__name__
            case["error"] = str(e)
        cases.append(case)
    (HERE / "hub_cases.json").write_text(
        json.dumps({"now": NOW, "cases": cases}, ensure_ascii=False, indent=1) + "\n",
        encoding="utf-8")


if __name__ == "__main__":
    main()
