#!/usr/bin/python3
"""Renders assistant tool-call turns with the Gemma 4 chat template for the parser round-trip tests.

Run with Debian's /usr/bin/python3 (python3-jinja2 3.1.2), not a pyenv interpreter:

    /usr/bin/python3 tools/render_tool_call_examples.py \
        --template ../shared/data/chat-templates/google-gemma-4-31B-it.jinja \
        --out tests/data/parsers/rendered_tool_calls.json

With --check the file is re-rendered and compared with --out instead of written (exit 1 on drift).

Each case is an assistant message (tool calls with dict arguments, optional content and
reasoning). The template renders it after a user turn; the text after the last "<|turn>model\n"
is what the model would have generated. The expected "arguments" string is
json.dumps(ensure_ascii=False) of the arguments with keys in the template's dictsort order, i.e.
what vLLM's gemma4 tool parser returns for that text (except exponent floats such as 1e-05, which
vLLM leaves as strings and we parse as numbers).
"""

import argparse
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tool_call(name, arguments, call_id):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# (case name, assistant message). Arguments are Python values so floats and ints keep their types.
CASES = [
    ("simple_string", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("get_weather", {"location": "Paris, France"}, "c1")]}),
    ("scalar_kinds", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("plan_trip", {"city": "Tokyo", "days": 3, "metric": True, "strict": False,
                                "threshold": -2.5, "note": None, "zero": 0}, "c1")]}),
    ("nested_objects", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("search", {"filter": {"price": {"max": 100, "min": 10}, "tags": ["a", "b"],
                                        "in_stock": True},
                             "sort": "price"}, "c1")]}),
    ("arrays", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("batch", {"ids": [1, 2, 3], "matrix": [[1, 2], [3, 4]],
                            "objs": [{"a": 1}, {"b": "x", "c": [True, None]}],
                            "empty_list": [], "empty_obj": {}, "mixed": ["s", 1, 2.5, False]},
                  "c1")]}),
    ("string_escapes", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("write_file", {
            "quote": 'He said "hi"',
            "backslash": "C:\\path\\to\\file",
            "newline": "line1\nline2\n",
            "tab": "a\tb",
            "control": "bell\x07end",
            "code": "if (a) { return [1, 2]; }",
            "punct": "a:b,c}d]e{f[",
            "unicode": "caf\u00e9 \u4e2d\u6587 \U0001F389",
            "empty": "",
            "spaces": "  padded  ",
            "angle": "<html><b>x</b></html> a < b > c <| |>"}, "c1")]}),
    ("floats", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("calc", {"a": 0.1, "b": 1e-05, "c": 1e16, "d": 100.0, "e": -0.0,
                           "f": 3.141592653589793, "g": 1.5e300, "h": 123456789.123,
                           "i": 1e15, "j": 0.0001, "k": -7.25e-10}, "c1")]}),
    ("big_ints", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("ledger", {"n": 12345678901234567890, "neg": -9007199254740993,
                             "huge": 123456789012345678901234567890}, "c1")]}),
    ("numeric_looking_strings", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("lookup", {"zip": "02134", "flag": "true", "nothing": "null",
                             "num": "42", "float": "3.5"}, "c1")]}),
    ("two_calls", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("get_weather", {"location": "Paris"}, "c1"),
        tool_call("get_time", {"timezone": "Europe/Paris", "format": 24}, "c2")]}),
    ("three_calls_mixed", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("a", {}, "c1"),
        tool_call("b", {"x": [1, {"y": "z"}]}, "c2"),
        tool_call("c", {"s": "}", "t": "{"}, "c3")]}),
    ("content_and_call", {"role": "assistant", "content": "Let me check the weather.",
                          "tool_calls": [tool_call("get_weather", {"location": "Oslo"}, "c1")]}),
    ("reasoning_and_call", {"role": "assistant", "content": None,
                            "reasoning": "The user wants the weather.\nI should call the tool.",
                            "tool_calls": [tool_call("get_weather", {"location": "Rome"}, "c1")]}),
    ("dotted_name", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("module.get-data_v2", {"key": "value"}, "c1")]}),
    ("key_order", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("sorter", {"Zeta": 1, "alpha": 2, "Beta": 3, "_under": 4, "a1": 5}, "c1")]}),
    ("no_arguments", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("ping", {}, "c1")]}),
    ("deep_nesting", {"role": "assistant", "content": None, "tool_calls": [
        tool_call("deep", {"l1": {"l2": {"l3": {"l4": [[[{"l5": "bottom"}]]]}}}}, "c1")]}),
]


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    return env


def dictsorted(env, value):
    """Recursively orders mapping keys the way the template's dictsort filter does."""
    if isinstance(value, dict):
        return {k: dictsorted(env, v) for k, v in env.filters["dictsort"](value)}
    if isinstance(value, list):
        return [dictsorted(env, v) for v in value]
    return value


def render_cases(template_text):
    env = make_env()
    template = env.from_string(template_text)
    out = []
    for name, message in CASES:
        messages = [{"role": "user", "content": "Please help."}, message]
        rendered = template.render(messages=messages, bos_token="<bos>",
                                   add_generation_prompt=False)
        marker = "<|turn>model\n"
        model_text = rendered[rendered.rindex(marker) + len(marker):]
        calls = [{"name": tc["function"]["name"],
                  "arguments": json.dumps(dictsorted(env, tc["function"]["arguments"]),
                                          ensure_ascii=False)}
                 for tc in message["tool_calls"]]
        out.append({
            "case": name,
            "model_text": model_text,
            "expected_tool_calls": calls,
            "expected_content": message.get("content"),
            "expected_reasoning": message.get("reasoning"),
        })
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    with open(args.template, encoding="utf-8") as f:
        template_text = f.read()
    data = {
        "generator": "tools/render_tool_call_examples.py",
        "template": args.template.split("/")[-1],
        "jinja2_version": jinja2.__version__,
        "cases": render_cases(template_text),
    }
    text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            old = json.load(f)
        if old["cases"] != data["cases"]:
            print("rendered tool calls differ from " + args.out, file=sys.stderr)
            return 1
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
