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
    goldens = build()
    text = json.dumps({"generator": "scripts/make-template-goldens.py",
                       "renderer": "transformers.utils.chat_template_utils.render_jinja_template",
                       "cases": goldens}, ensure_ascii=False, indent=1) + "\n"
    if args.check:
        same = OUT.read_text() == text
        print("goldens up to date" if same else "goldens differ from a fresh render")
        return 0 if same else 1
    OUT.write_text(text)
    n_err = sum("error" in c for c in goldens)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(goldens)} cases ({n_err} raise an exception)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
