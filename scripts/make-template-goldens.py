#!/usr/bin/env python3
"""Renders every chat template in tests/fixtures/templates/ with Hugging Face
transformers' own renderer (the jinja2 sandbox apply_chat_template uses) over
a set of conversations and options, and writes the results as goldens to
tests/fixtures/templates/goldens.json. tests/py/test_template.py checks that
`lpx template` renders each case byte for byte the same.

Usage: scripts/make-template-goldens.py [--check]
  --check  render again and compare with the committed goldens (no writing)
"""
import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TDIR = ROOT / "tests/fixtures/templates"
OUT = TDIR / "goldens.json"
CONSTRUCTS_OUT = TDIR / "constructs.json"

# Special token texts as each model's tokenizer config declares them
# (None: the model has no such token, so the variable is undefined).
TEMPLATES = {
    "Qwen-Qwen3-0.6B.jinja": ("qwen3", None, "<|im_end|>"),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("qwen2.5", None, "<|im_end|>"),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("llama3.2", "<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("llama3.3", "<|begin_of_text|>", "<|eot_id|>"),
    "HuggingFaceTB-SmolLM2-135M-Instruct.jinja": ("smollm2", "<|im_start|>", "<|im_end|>"),
    "mistralai-Mistral-7B-Instruct-v0.1.jinja": ("mistral0.1", "<s>", "</s>"),
    "mistralai-Mistral-7B-Instruct-v0.3.jinja": ("mistral0.3", "<s>", "</s>"),
}


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def s(text):
    return {"role": "system", "content": text}


UNICODE = "héllo 世界 🙂 👨‍👩‍👧 e\u0301 مرحبا こんにちは 한국어 \u00a0nbsp\u3000ideo"
TRICKY = "{{ x }} {% if y %}z{% endif %} {# c #} <|im_end|> <|eot_id|> [INST] </s> \\n \"q\" 'q'"
WHITESPACE = "  \n\tleading and trailing whitespace\n\n  inner\r\nline  \t\n "

CONVERSATIONS = {
    "single_user": [u("Hello!")],
    "system_user": [s("You are a helpful assistant."), u("What is 2+2?")],
    "multi_turn": [u("Hi"), a("Hello! How can I help?"), u("Tell me a joke.")],
    "system_multi_turn": [
        s("Be brief."), u("One"), a("Two"), u("Three"), a("Four"), u("Five")],
    "assistant_last": [u("Write a haiku."), a("Fast tokens flow\nthrough silicon rivers\nmemory bound")],
    "system_assistant_last": [s("sys"), u("q"), a("answer")],
    "unicode": [s(UNICODE), u(UNICODE), a(UNICODE), u(UNICODE)],
    "template_looking": [u(TRICKY), a(TRICKY), u(TRICKY)],
    "whitespace": [s(WHITESPACE), u(WHITESPACE), a(WHITESPACE), u(WHITESPACE)],
    "empty_content": [s(""), u(""), a(""), u("")],
    "empty_user": [u("")],
    "long_conversation": [x for i in range(8) for x in (u(f"question {i}"), a(f"answer {i}"))]
    + [u("last question")],
    "think_in_history": [
        u("What is 7*6?"),
        a("<think>\nSeven times six.\n</think>\n\n42"),
        u("And 6*7?")],
    "think_last": [u("What is 7*6?"), a("<think>\nSeven times six.\n</think>\n\n42")],
    "think_no_newlines": [u("q"), a("<think>r</think>A"), u("q2"), a("<think>\n\nr2\n\n</think>A2")],
    "reasoning_content_field": [
        u("Why?"), {"role": "assistant", "content": "Because.", "reasoning_content": "Let me think."},
        u("Sure?")],
    "reasoning_content_last": [
        u("Why?"), {"role": "assistant", "content": "Because.", "reasoning_content": "Let me think."}],
    "reasoning_field_alias": [
        u("Why?"), {"role": "assistant", "content": "Because.", "reasoning": "Alias name."}],
    # Role order errors (Mistral raises; others render).
    "starts_with_assistant": [a("I speak first."), u("ok")],
    "two_users": [u("one"), u("two")],
    "system_then_assistant": [s("sys"), a("hi")],
    "system_only": [s("Only a system message.")],
}

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "days": {"type": "integer"}},
                       "required": ["city"]},
    },
}]
TOOL_CONVERSATION = [
    s("You can call tools."),
    u("Weather in Paris?"),
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "call12345", "type": "function",
                     "function": {"name": "get_weather",
                                  "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
    {"role": "tool", "tool_call_id": "call12345", "content": "second result"},
    a("It is 21 degrees and clear."),
    u("Thanks!"),
]


# Small templates, one construct each, rendered with these variables: the
# semantics of the subset beyond what the official templates exercise.
CONSTRUCT_VARS = {
    "s": "Hello World", "u": "h\u00e9llo w\u00f6rld \u4e16\u754c", "e": "", "ws": " \t a b \n c \u3000",
    "n": None, "t": True, "f": False, "i": 7, "neg": -3, "x": 2.5, "big": 1e20, "small": 1.5e-7,
    "l": [3, 1, 2], "ls": ["b", "A", "c", "a"], "empty": [],
    "d": {"b": 1, "a": [1, 2], "c": {"k": "v"}, "n": None},
    "people": [{"name": "Ann", "age": 31, "role": "user"}, {"name": "bob", "age": 25, "role": "assistant"},
               {"name": "Cy", "age": 40, "role": "user"}],
}
CONSTRUCTS = [
    # printing values
    "{{ s }}|{{ n }}|{{ t }}|{{ f }}|{{ i }}|{{ neg }}|{{ x }}|{{ big }}|{{ small }}|{{ undefined_var }}|",
    "{{ l }}|{{ ls }}|{{ d }}|{{ empty }}|{{ (1, 'a') }}|{{ (1,) }}|{{ () }}",
    "{{ [\"it's\", 'say \"hi\"', 'tab\there', 'nl\\n', '\\x01', '\\u00a0', '\\u200b'] }}",
    "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 3.14159 }} {{ 2.0 ** 0.5 }}",
    # operators
    "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}",
    "{{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 2.5 }} {{ true + 1 }} {{ 'ab' * 3 }} {{ [1] * 3 }} {{ 3 * 'x' }} {{ 'a' * 0 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ [1] ~ undefined_var }}|{{ s + '!' }}|{{ l + [4] }}|{{ (1,) + (2,) }}",
    "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }}",
    "{{ 'Hello' in s }} {{ 'x' in s }} {{ 2 in l }} {{ 'a' in d }} {{ 'z' not in d }} {{ 4 not in l }} {{ '' in s }} {{ 'x' in undefined_var }}",
    "{{ 1 and 2 }} {{ 0 and 2 }} {{ 0 or 'y' }} {{ none or 0 }} {{ not 0 }} {{ not l }} {{ e or 'empty' }} {{ n is none and t }}",
    "{{ 'yes' if t else 'no' }} {{ 'yes' if f else 'no' }} [{{ 'only' if f }}] {{ 1 if f else 2 if t else 3 }}",
    "{{ -i }} {{ +i }} {{ -x }} {{ - - i }} {{ -3|abs }} {{ not t == f }}",
    # indexing, slicing, attributes
    "{{ l[0] }} {{ l[-1] }} {{ s[0] }} {{ s[-1] }} {{ u[1] }} {{ d['b'] }} {{ d.b }} {{ d.c.k }} {{ d['c']['k'] }} {{ people[1].name }}",
    "{{ s[1:4] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ s[-3:] }}|{{ s[:-3] }}|{{ u[::-1] }}|{{ u[2:5] }}|{{ l[::-1] }}|{{ l[1:] }}|{{ l[5:] }}|{{ s[10:2:-2] }}",
    "{{ l[9] is defined }} {{ d.zz is defined }} {{ d['zz'] is defined }} {{ s.nope is defined }} {{ n.x is defined }}",
    "{{ d.items is defined }} {{ d.n is none }} {{ people.0.name }} {{ l.1 }}",
    # string methods
    "{{ s.upper() }} {{ s.lower() }} {{ u.upper() }} {{ 'hello wORLD foo-bar'.title() }} {{ 'hELLO world'.capitalize() }}",
    "[{{ ws.strip() }}] [{{ ws.lstrip() }}] [{{ ws.rstrip() }}] [{{ 'xxhixx'.strip('x') }}] [{{ '\\n\\nhi\\n'.strip('\\n') }}] [{{ 'abcba'.lstrip('ab') }}]",
    "{{ 'a,b,,c'.split(',') }} {{ ws.split() }} {{ 'a b c'.split(' ', 1) }} {{ '  a  b  '.split(none, 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'abc'.split('x') }}",
    "{{ s.startswith('Hell') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith('ld') }} {{ s.endswith('') }} {{ e.startswith('') }}",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ 'ab'.replace('', '-') }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('zz') }} {{ u.find('w') }} {{ s.count('l') }}",
    "{{ ', '.join(ls) }} {{ '-'.join('abc') }} {{ 'a\\nb\\r\\nc\\rd\\n'.splitlines() }}",
    # dict methods
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 5) }}",
    "{% for k in d %}{{ k }}{% endfor %} {% for c in 'h\u00e9!' %}[{{ c }}]{% endfor %} {% for x in undefined_var %}never{% endfor %}",
    # filters
    "{{ s|length }} {{ u|length }} {{ l|length }} {{ d|count }} {{ undefined_var|length }} {{ s|upper }} {{ s|lower }} {{ 'aB cD'|title }} {{ 'aB cD'|capitalize }}",
    "[{{ ws|trim }}] [{{ 'xxhixx'|trim('x') }}] {{ i|string }}{{ n|string }} {{ l|string }} {{ s|replace('o', '0') }} {{ s|reverse }} {{ l|reverse|list }}",
    "{{ undefined_var|default('dflt') }} {{ e|default('dflt') }} {{ e|default('dflt', true) }} {{ n|default('x') }} {{ undefined_var|d('short') }}",
    "{{ l|first }} {{ l|last }} {{ s|first }} {{ empty|first is defined }} {{ l|list }} {{ s|list }} {{ d|list }} {{ d|items|list }}",
    "{{ l|join }} {{ l|join(', ') }} {{ people|join(', ', attribute='name') }} {{ ls|sort }} {{ ls|sort(case_sensitive=true) }} {{ l|sort(reverse=true) }}",
    "{{ people|sort(attribute='age')|map(attribute='name')|list }} {{ people|map(attribute='name')|join('/') }} {{ people|map(attribute='zz', default='?')|list }} {{ l|map('string')|list }}",
    "{{ people|selectattr('role', 'equalto', 'user')|map(attribute='name')|list }} {{ people|rejectattr('role', 'equalto', 'user')|list|length }} {{ people|selectattr('age', 'gt', 30)|list|length }}",
    "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ ['a', 'A', 'b', 'a']|unique|list }} {{ ['a', 'A']|unique(case_sensitive=true)|list }}",
    "{{ d|tojson }} {{ ls|tojson }} {{ 'h\u00e9 \"q\" \\\\ \\n \\t \\u0001'|tojson }} {{ n|tojson }} {{ x|tojson }} {{ t|tojson }} {{ i|tojson }}",
    "{{ d|tojson(indent=2) }}|{{ people[0]|tojson(indent=4) }}|{{ empty|tojson(indent=2) }}|{{ {}|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}",
    "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}|{{ 'x'|indent('> ') }}",
    "{{ '42'|int }} {{ 'x'|int }} {{ 'x'|int(-1) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 3|float }} {{ neg|abs }} {{ l|sum }} {{ people|sum(attribute='age') }}",
    # tests
    "{{ s is string }} {{ i is string }} {{ i is number }} {{ x is number }} {{ i is integer }} {{ x is float }} {{ t is boolean }} {{ n is none }} {{ d is mapping }} {{ l is mapping }}",
    "{{ l is iterable }} {{ s is iterable }} {{ i is iterable }} {{ d is iterable }} {{ l is sequence }} {{ t is true }} {{ f is false }} {{ i is odd }} {{ i is even }} {{ 9 is divisibleby 3 }}",
    "{{ s is defined }} {{ zz is defined }} {{ zz is undefined }} {{ s is equalto 'Hello World' }} {{ i is eq 7 }} {{ i is ne 7 }} {{ i is lt 8 }} {{ i is ge 7 }} {{ 2 is in l }} {{ 'ell' is in s }}",
    "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ n is sameas none }} {{ t is sameas true }} {{ raise_exception is callable }} {{ s is not none }}",
    # statements and scoping
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in l %}{{ loop.previtem is defined }}{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}",
    "{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in empty %}x{% else %}else{% endfor %}",
    "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}",
    "{% set v = 'outer' %}{% for x in [1, 2] %}{{ v }}{% set v = x %}{{ v }} {% endfor %}{{ v }}",
    "{% set ns = namespace(total=0, names=[]) %}{% for p in people %}{% set ns.total = ns.total + p.age %}{% set ns.names = ns.names + [p.name] %}{% endfor %}{{ ns.total }} {{ ns.names }}",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }} {% for k, v in [('x', 1), ('y', 2)] %}{{ k }}{{ v }}{% endfor %}",
    "{% if i > 5 %}big{% elif i > 2 %}mid{% else %}small{% endif %} {% if none %}a{% elif 0 %}b{% endif %}",
    "{% set captured %}  inner {{ s }}  {% endset %}[{{ captured }}] {% set cap2 | trim | upper %}  x {% endset %}[{{ cap2 }}]",
    "{% for i in range(3) %}{{ i }}{% endfor %} {{ range(2, 8, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b=2) }} {{ namespace(a=1).a }}",
    "{{ {'a': 1, 'b': 2}['b'] }} {{ [1, 2, 3][1] }} {{ ('x', 'y')[0] }} {{ {'k': {'n': [5]}}.k.n[0] }} {{ {1: 'one', true: 'yes'} }}",
    # whitespace control and comments
    "a\n  {% if true %}\n  x\n  {% endif %}\n  y\n",
    "a  {%- if true -%}  x  {%- endif %}  \n  b {{- ' c ' -}} d {#- note -#}  e\n{# comment #}\nf",
    "  {%+ if true %}kept{% endif +%}\n  {{ 'v' }}  \n{% for x in l %}\n  {{ x }}\n{% endfor %}\n",
    "line1\r\nline2\r{% if true %}\r\n  yes\r\n{% endif %}\n\n",
    "{{ 'a' 'b' \"c\" }} {{ '\\x41\\u00e9\\U0001F600\\101\\a\\q' }} {{ 1_000 + 0.5e1 }}",
    # macros
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C') }} {{ greet() }}|",
    "{%- macro render(x) -%}\n  {%- if x is mapping -%}{{ x|tojson }}{%- else -%}{{ x }}{%- endif -%}\n{%- endmacro -%}\n{{ render(d) }} {{ render(s) }}",
    "{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'H' %}{{ m() }} {% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1)|int) }}{% endif %}{% endmacro %}{{ fact(5) }}",
    "{% macro m(a, b=a ~ 'x') %}{{ a }}{{ b }}{% endmacro %}{{ m('q') }} {% macro w() %}  x  {% endmacro %}[{{ w() }}] {{ w()|trim }} {{ w is callable }}",
    # errors transformers raises too
    "{{ raise_exception('custom: ' ~ s) }}",
]


def build_constructs():
    out = []
    for idx, template in enumerate(CONSTRUCTS):
        case = {"id": f"construct{idx:02d}", "template_text": template, "vars": CONSTRUCT_VARS}
        try:
            case["expected"] = render(template, [], False, None, None, CONSTRUCT_VARS)
        except Exception as e:
            case["error"] = str(e)
        out.append(case)
    return out


def render(template, messages, agp, bos, eos, extra):
    from transformers.utils.chat_template_utils import render_jinja_template

    kwargs = dict(extra)
    tools = kwargs.pop("tools", None)
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    rendered, _ = render_jinja_template(conversations=[messages], tools=tools,
                                        chat_template=template, add_generation_prompt=agp,
                                        **kwargs)
    return rendered[0]


def cases():
    """Every (template, conversation, options) combination of the goldens."""
    for fname, (fam, bos, eos) in TEMPLATES.items():
        option_sets = [{}]
        if fam == "qwen3":
            option_sets = [{}, {"enable_thinking": True}, {"enable_thinking": False}]
        elif fam == "llama3.2":  # without date_string it prints today's date: tested live only
            option_sets = [{"date_string": "26 Jul 2024"}, {"date_string": "05 Nov 2026"}]
        elif fam == "llama3.3":
            option_sets = [{}, {"date_string": "05 Nov 2026"}]
        for conv_name, messages in CONVERSATIONS.items():
            for opts in option_sets:
                for agp in (False, True):
                    yield fam, fname, conv_name, messages, agp, bos, eos, opts
        tool_opts = {"tools": TOOLS}
        if fam.startswith("llama"):
            tool_opts["date_string"] = "26 Jul 2024"
        if fam in ("qwen3", "qwen2.5", "llama3.2", "llama3.3", "mistral0.3"):
            conv = TOOL_CONVERSATION
            if fam.startswith("mistral"):  # Mistral wants no system message mid-way, 9-char ids
                conv = TOOL_CONVERSATION[1:4] + TOOL_CONVERSATION[5:]
            for agp in (False, True):
                yield fam, fname, "tools", conv, agp, bos, eos, tool_opts
            if fam.startswith("llama"):
                yield (fam, fname, "tools_in_system", TOOL_CONVERSATION, True, bos, eos,
                       dict(tool_opts, tools_in_user_message=False))


def build():
    out = []
    for fam, fname, conv_name, messages, agp, bos, eos, opts in cases():
        template = (TDIR / fname).read_text()
        case_id = f"{fam}-{conv_name}-{'agp' if agp else 'noagp'}"
        for k, v in opts.items():
            if k != "tools":
                case_id += f"-{k}={v}"
        case = {"id": case_id, "template": fname, "messages": messages,
                "add_generation_prompt": agp}
        if bos is not None:
            case["bos_token"] = bos
        if eos is not None:
            case["eos_token"] = eos
        for k in ("enable_thinking", "date_string"):
            if k in opts:
                case[k] = opts[k]
        extra_vars = {k: v for k, v in opts.items() if k not in ("enable_thinking", "date_string")}
        if extra_vars:
            case["vars"] = extra_vars
        try:
            case["expected"] = render(template, messages, agp, bos, eos, opts)
        except Exception as e:  # jinja2 TemplateError from raise_exception
            case["error"] = str(e)
        out.append(case)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    status = 0
    for path, goldens in ((OUT, build()), (CONSTRUCTS_OUT, build_constructs())):
        text = json.dumps({"generator": "scripts/make-template-goldens.py",
                           "renderer": "transformers.utils.chat_template_utils.render_jinja_template",
                           "cases": goldens}, ensure_ascii=False, indent=1) + "\n"
        name = path.relative_to(ROOT)
        if args.check:
            same = path.read_text() == text
            print(f"{name}: " + ("up to date" if same else "differs from a fresh render"))
            status |= not same
            continue
        path.write_text(text)
        n_err = sum("error" in c for c in goldens)
        print(f"wrote {name}: {len(goldens)} cases ({n_err} raise an exception)")
    return status


if __name__ == "__main__":
    sys.exit(main())
