#!/usr/bin/env python3
"""make_jinja_cases.py - the Jinja subset construct by construct, rendered by Jinja2.

Run in the same venv as make_fixtures.py. Writes jinja_cases.json: for each small
template below (with its variables) the output transformers' environment gives
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception and strftime_now), or the error type when Jinja2 refuses it.
tests/unit/test_jinja.c renders each and compares byte for byte.
"""
import json
import pathlib

from transformers.utils import chat_template_utils as ctu

HERE = pathlib.Path(__file__).parent
M = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "yo"}]

CASES = [
    # text and whitespace control
    ("plain text", {}),
    ("a\n{% if true %}\n  b\n{% endif %}\nc\n", {}),
    ("  {% if true %}x{% endif %}  \n", {}),
    ("a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("a  {{- 'b' -}}  c", {}),
    ("a {{ 'b' }} c", {}),
    ("x\n    {%+ if true %}y{% endif +%}\nz", {}),
    ("x\n  {# comment #}\ny", {}),
    ("x {#- comment -#} y", {}),
    ("line\r\nnext\r\n", {}),
    ("{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("{%- for m in messages %}\n    {{- m.role }}\n{%- endfor %}\n", {"messages": M}),
    ("  {% if true %}\n    a\n  {% endif %}\n  b {% if true %} c {% endif %} d\n", {}),
    ("x  {% if true %}y{% endif %}\n\t{% for i in [1] %}{{ i }}{% endfor %}  \n", {}),
    ("a\n  {#- c #}\n  {# c -#}\n  b\n  {{- 'c' }}\n{%- if true %}\n d{% endif -%}\n\n e", {}),
    ("a\r\n  {% if true %}\r\nb\r\n  {% endif %}\r\nc", {}),
    ("{% if true %}   \n  x{% endif %}", {}),
    ("{% for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}\n  {{ 'end' }}", {}),
    ("{%- set x = 1 -%}\n\n  {{ x }}  \n\n{%- set y = 2 %}\n{{ y }}", {}),
    ("\n\n{% macro m() -%}\n  in\n{%- endmacro %}\n[{{ m() }}]\n", {}),
    ("{{ 'a' }}\n{{ 'b' }}\n\n", {}),
    # literals and printing
    ("{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 1.0 }} {{ 2.50 }} {{ 1e3 }} {{ 0.1 + 0.2 }}", {}),
    ("{{ true }} {{ false }} {{ none }} {{ True }} {{ None }}", {}),
    ("{{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': [1]} }}", {}),
    ("{{ 'it\\'s' }} {{ \"say \\\"x\\\"\" }} {{ 'a\\nb' }} {{ 'tab\\tend' }}", {}),
    ("{{ ['it\\'s', 'a\"b', 'back\\\\'] }}", {}),
    ("{{ 'é' ~ '\\u00e9' ~ '\\x41' }}", {}),
    ("{{ 'ab' 'cd' }}", {}),
    ("[{{ undefined_name }}] {{ [undefined_name, {'k': nope}] }}", {}),
    # operators
    ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 3 * 'ab' }}", {}),
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'a' ~ 1 ~ none }} {{ 'a' + 'b' }}", {}),
    ("{{ [1] + [2] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", {}),
    ("{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ not 'x' in 'y' }}", {}),
    ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or [] }} {{ none and 1 }} {{ not none }}", {}),
    ("{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}]", {}),
    ("{{ messages[0] == messages[0] }} {{ messages[0] == messages[1] }} {{ [1, [2]] == [1, [2]] }}",
     {"messages": M}),
    # access
    ("{{ messages[0]['role'] }} {{ messages[-1].content }} [{{ messages[9] }}] [{{ messages[0].nope }}]",
     {"messages": M}),
    ("{{ messages[1:]|length }} {{ messages[:1][0].role }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][::2] }} {{ 'héllo'[1] }}",
     {"messages": M}),
    ("{{ [1,2,3][-2:] }} {{ [1,2,3][5:] }} {{ [1,2,3][:-5] }} {{ 'abc'[-1] }}", {}),
    # if / for / loop
    ("{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}", {}),
    ("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}|{% endfor %}",
     {"messages": M}),
    ("{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }} of {{ loop.length }};{% endfor %}",
     {"messages": M}),
    ("{% for x in [] %}a{% else %}empty{% endfor %}", {}),
    ("{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }}{% if not loop.last %},{% endif %}{% endfor %}", {}),
    ("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %} {% for c in 'hé' %}[{{ c }}]{% endfor %}", {}),
    ("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}{% endfor %}",
     {"messages": M}),
    ("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}", {}),
    # set, scopes, namespace, macro
    ("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}{{ ns.s }}", {}),
    ("{% set messages = messages[1:] %}{{ messages|length }}", {"messages": M}),
    ("{% macro tag(name, v='d') %}<{{ name }}={{ v }}>{% endmacro %}{{ tag('a') }}{{ tag('b', 'x') }}{{ tag(v='y', name='c') }}", {}),
    ("{% macro f(x) %}{% if x > 0 %}{{ x }}{{ f(x - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", {}),
    ("{% set d = {'a': 1} %}{{ d.get('a') }} {{ d.get('b') }} {{ d.get('b', 2) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }}", {}),
    ("{% set x %}a{{ 1 + 1 }}{% endset %}[{{ x }}] {% set y -%}\n  trimmed\n{%- endset %}[{{ y }}]", {}),
    # tuples
    ("{{ (1, 'a') }} {{ (1,) }} {{ () }} {{ 'b' in ('a', 'b') }} {{ messages[0].role in ('user', 'system') }}",
     {"messages": M}),
    ("{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %} {{ {'a': 1}|items|list }}", {}),
    ("{{ messages.0.role }} {{ [[1, 2]].0.1 }}", {"messages": M}),
    # generators, dict views and tuples are not lists
    ("{{ 'yes' if []|select else 'no' }} {{ 'yes' if []|list else 'no' }} {{ []|selectattr('a')|list|length }} {{ [3, 1]|reverse|list }} {{ [3, 1]|reverse|join(',') }}", {}),
    ("{{ {'a': 1}.items() }} {{ {'a': 1}.keys() }} {{ {'a': 1}.values() }} {{ {'a': 1}.keys()|length }} {{ (1, 2) == [1, 2] }} {{ (1, 2) == (1, 2) }}", {}),
    ("{{ [1]|select is sequence }} {{ [1] is sequence }} {{ range(2) is sequence }} {{ ([1]|select)[0] is defined }} {{ 1 in [1, 2]|select }}", {}),
    ("{{ []|select|length }}", {}),
    ("{{ [1]|select|last }}", {}),
    ("{{ [1]|select|tojson }}", {}),
    ("{% macro m(x) %}<{{ caller() }}|{{ x }}>{% endmacro %}{% call m(1) %}body {{ 2 }}{% endcall %}", {}),
    ("{% macro m() %}{{ caller('a') }}{{ caller('b') }}{% endmacro %}{% call(v, w='-') m() %}[{{ v }}{{ w }}]{% endcall %}", {}),
    ("{% macro m(x) %}{{ x }}{{ caller() }}{% endmacro %}{% for i in [1, 2] %}{% call m(0) %}{{ i }}{% endcall %};{% endfor %}", {}),
    # tests
    ("{{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ x is not none }}", {"x": 1}),
    ("{{ 'a' is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.5 is float }} {{ true is boolean }} {{ 1 is string }}", {}),
    ("{{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ [] is sequence }}", {}),
    ("{{ 2 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 1 is eq 1 }} {{ 'a' is equalto 'b' }} {{ none is sameas none }}", {}),
    ("{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 3 is gt 2 }} {{ 3 is lt 2 }} {{ 2 is in [1, 2] }} {{ x is true }} {{ x is false }}", {"x": True}),
    # filters
    ("[{{ '  a b \\n'|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ none|trim }}] [{{ y|trim }}]", {}),
    ("{{ 'hello WORLD'|upper }} {{ 'Hello'|lower }} {{ 'hello wORLD-x (y'|title }} {{ 'hELLO world'|capitalize }}", {}),
    ("{{ [1,2]|length }} {{ 'héllo'|length }} {{ {'a': 1}|length }} {{ y|length }} {{ 'abc'|count }}", {}),
    ("{{ y|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} {{ 0|d(5, boolean=true) }}", {}),
    ("{{ ['a', 'b']|join(', ') }} {{ [1, 2]|join }} {{ messages|join('|', attribute='role') }}", {"messages": M}),
    ("{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }}",
     {"messages": M}),
    ("{{ [0, 1, '', 'a']|select|list }} {{ [1, 2, 3]|reject('odd')|list }} {{ [{'a': 1}, {'b': 2}]|selectattr('a')|list }}", {}),
    ("{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ [1, 2]|reverse|list }} {{ 'abc'|reverse }} {{ 'ab'|list }}", {}),
    ("{{ 1|string ~ 2 }} {{ '3'|int + 1 }} {{ 'x'|int }} {{ '2.5'|float }} {{ -3|abs }} {{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }}", {}),
    ("{{ {'k': 'é\"\\n', 'n': [1, 2.5, none, true], 'e': {}, 'l': []}|tojson }}", {}),
    ("{{ {'b': 1, 'a': {'c': [1, {}]}}|tojson(indent=2) }}", {}),
    ("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ 'x'|tojson }} {{ none|tojson }} {{ [1, 'a']|tojson(indent=4) }}", {}),
    ("{{ '<b>&'|safe }} {{ 'x'|tojson }}", {}),
    ("{{ {'a': [1, 2], 'b': 'x'}|tojson(separators=(',', ':')) }} {{ [1, {'k': 2}]|tojson(indent=2, separators=(', ', ' = ')) }}", {}),
    ("[{{ 'a\nb\n\nc'|indent }}] [{{ 'a\nb'|indent(2, true) }}] [{{ 'a\n\nb\n'|indent(width='> ', blank=true) }}] [{{ 'x\r\ny'|indent(1) }}]", {}),
    ("{{ '{\n  \"k\": 1\n}'|indent(4) }}|{{ ''|indent(first=true) }}|", {}),
    # string methods
    ("[{{ '  a  '.strip() }}] [{{ '  a  '.lstrip() }}] [{{ '  a  '.rstrip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '\\u00a0a\\u3000'.strip() }}]", {}),
    ("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith('lo') }}", {}),
    ("{{ 'a'.startswith(['x', 'a']) }}", {}),
    ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a  b c'.split(none, 1) }}", {}),
    ("{{ 'aXbXc'.replace('X', '-') }} {{ 'abc'.replace('', '.') }} {{ 'hello'.upper() }} {{ 'HeLLo'.lower() }} {{ \"they're bill's\".title() }} {{ 'hi there'.capitalize() }}", {}),
    ("{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ '-'.join(['a', 'b']) }}", {}),
    ("{{ 'grüße'.capitalize() }} {{ 'ÉCOLE'.lower() }} {{ 'é'|upper }}", {}),
    # transformers' globals
    ("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }}", {}),
    ("{% if strftime_now is defined %}yes{% endif %}", {}),
    ("{{ raise_exception('Nope: ' ~ 3) }}", {}),
    ("{% generation %}gen{% endgeneration %}", {}),
    # errors Jinja2 raises too
    ("{{ 'a' + 1 }}", {}),
    ("{{ undefined_name.attr }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{% set x = 1 %}{% set x.a = 2 %}", {}),
    ("{{ none|length }}", {}),
]


def main():
    out = {"now": 1736942400, "cases": []}
    import datetime as dt
    import os
    import time
    os.environ["TZ"] = "UTC"
    time.tzset()

    class FixedDatetime(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime.fromtimestamp(out["now"], tz)

    ctu.datetime = FixedDatetime
    for src, variables in CASES:
        case = {"template": src, "vars": variables}
        try:
            case["expected"] = ctu._compile_jinja_template(src).render(**variables)
        except Exception as e:
            case["error_type"] = type(e).__name__
            case["error"] = str(e)
        out["cases"].append(case)
    (HERE / "jinja_cases.json").write_text(
        json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
