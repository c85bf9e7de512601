#!/usr/bin/python3
"""Renders a chat template for each conversation the way transformers' apply_chat_template does.

Run with Debian's /usr/bin/python3 and python3-jinja2. The environment matches Hugging Face's:
ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols), its tojson,
raise_exception and strftime_now, the {% generation %} tag as a no-op, and continue_final_message
cut as transformers cuts it.

usage: render_chat_template.py --template FILE --conversations FILE.json
                               [--bos-token TEXT] [--eos-token TEXT] [--vllm-messages]
                               [--content-format auto|string|openai]
       render_chat_template.py --template FILE --detect-content-format
Prints a JSON array: the rendered string per conversation, or {"error": message}.
--vllm-messages first post-processes the messages as vLLM's chat_utils does before it renders
(tool-call arguments strings -> objects; content per vLLM's chat-template content format,
detected by walking the template's jinja2 syntax tree as vllm/renderers/hf.py does: part lists
joined with "\n" for "string", normalized text parts for "openai", text-part tool results one
string): what gemmaserve's server and LLM::chat render. One difference from vLLM, gemmaserve's
too: content given as a string stays a string (vLLM's "openai" wraps it into one text part, which
Gemma 4's template writes as a Python list in the system turn).
--detect-content-format prints "string" or "openai" for the template.
"""
import argparse
import json
import sys
from collections import deque
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(jinja2.ext.Extension):
    """HF's {% generation %} block; rendering its body unchanged is all a prompt needs."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def final_message_text(chat):
    final_message = chat[-1]["content"]
    if isinstance(final_message, (list, tuple)):
        for block in reversed(final_message):
            if "text" in block:
                return block["text"]
        raise ValueError("continue_final_message is set but we could not find any text to "
                         "continuein the final message!")
    return final_message


def vllm_arguments(arguments):
    """vLLM's rule: a JSON object stays, a string holding a JSON object is parsed, all else -> {}."""
    if not arguments:
        return {}
    if isinstance(arguments, dict):
        return arguments
    parsed = arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return {}
    return parsed if isinstance(parsed, dict) else {}


def _is_var_access(node, varname):
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == varname


def _is_attr_access(node, varname, key):
    if isinstance(node, jinja2.nodes.Getitem):
        return (_is_var_access(node.node, varname) and isinstance(node.arg, jinja2.nodes.Const)
                and node.arg.value == key)
    if isinstance(node, jinja2.nodes.Getattr):
        return _is_var_access(node.node, varname) and node.attr == key
    return False


def _is_var_or_elems_access(node, varname, key=None):
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Test):
        return _is_var_or_elems_access(node.node, varname, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _is_var_or_elems_access(node.node, varname, key)
    return _is_attr_access(node, varname, key) if key else _is_var_access(node, varname)


def _messages_aliases(root):
    names = ["messages"]
    queue = deque(["messages"])
    while queue:
        name = queue.popleft()
        for assign in root.find_all(jinja2.nodes.Assign):
            if _is_var_or_elems_access(assign.node, name):
                assert isinstance(assign.target, jinja2.nodes.Name)
                if assign.target.name not in names:  # vLLM would loop on a = b; b = a
                    names.append(assign.target.name)
                    queue.append(assign.target.name)
    return names


def detect_content_format(source):
    """vllm/renderers/hf.py _detect_content_format: "openai" when the template loops over a
    message's content, the message being a loop variable over messages (or a variable set from
    it); "string" otherwise, and when the walk fails."""
    try:
        root = make_environment().parse(source)
        messages = _messages_aliases(root)
        message_vars = []
        for loop in root.find_all(jinja2.nodes.For):
            if any(_is_var_or_elems_access(loop.iter, v) for v in messages):
                assert isinstance(loop.target, jinja2.nodes.Name)
                message_vars.append(loop.target.name)
        for loop in root.find_all(jinja2.nodes.For):
            if any(_is_var_or_elems_access(loop.iter, v, "content") for v in message_vars):
                assert isinstance(loop.target, jinja2.nodes.Name)
                return "openai"
    except Exception:
        return "string"
    return "string"


TEXT_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
             "thinking": "thinking"}


def _part_text(part):
    """(is a text part, its text or None) as vLLM's MM_PARSER_MAP reads it."""
    if isinstance(part, str):
        return True, part
    if isinstance(part, dict) and part.get("type") in TEXT_KEYS:
        text = part.get(TEXT_KEYS[part["type"]])
        return True, text if isinstance(text, str) else None
    return False, None


def vllm_content(content, role, content_format):
    """vLLM's _parse_chat_message_content for one message's content (strings kept as given)."""
    if content is None:
        return [] if content_format == "openai" and role != "tool" else ""
    if not isinstance(content, list):
        return content
    if content_format == "string":
        texts, images = [], 0
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image":
                images += 1
                continue
            is_text, text = _part_text(part)
            if not is_text:
                raise ValueError(f"Unsupported chat content part type: {part.get('type')!r}")
            if text:
                texts.append(text)
        text = "\n".join(texts)
        missing = images - text.count("<|image|>")
        if missing < 0:
            raise ValueError("Found more '<|image|>' placeholders in input prompt than actual "
                             "multimodal data items.")
        return "\n".join(["<|image|>"] * missing + ([text] if text else []))
    parts = []
    for part in content:
        is_text, text = _part_text(part)
        if not is_text:
            parts.append(part)
        elif text is not None:
            parts.append({"type": "text", "text": text})
    if role == "tool" and all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def vllm_messages(messages, content_format):
    """The messages as vLLM hands them to a template of content_format (a deep copy)."""
    messages = json.loads(json.dumps(messages))
    for message in messages:
        if message["role"] == "assistant" and "tool_calls" in message:
            if not message["tool_calls"]:
                del message["tool_calls"]
            else:
                for call in message["tool_calls"]:
                    call["function"]["arguments"] = vllm_arguments(
                        call["function"].get("arguments"))
        message["content"] = vllm_content(message.get("content"), message["role"],
                                          content_format)
    return messages


def render(template, conversation, bos_token, eos_token, content_format=None):
    add_generation_prompt = conversation.get("add_generation_prompt", False)
    continue_final_message = conversation.get("continue_final_message", False)
    if continue_final_message and add_generation_prompt:
        raise ValueError(
            "continue_final_message and add_generation_prompt are not compatible. Use "
            "continue_final_message when you want the model to continue the final message, and "
            "add_generation_prompt when you want to add a header that will prompt it to start a "
            "new assistant message instead.")
    chat = conversation.get("messages", [])
    if content_format:
        chat = vllm_messages(chat, content_format)
    kwargs = {"bos_token": bos_token, "eos_token": eos_token}
    kwargs.update(conversation.get("chat_template_kwargs") or {})
    rendered = template.render(messages=chat, tools=conversation.get("tools"), documents=None,
                               add_generation_prompt=add_generation_prompt, **kwargs)
    if continue_final_message:
        final_message = final_message_text(chat)
        if final_message.strip() not in rendered:
            raise ValueError("continue_final_message is set but the final message does not "
                             "appear in the chat after applying the chat template!")
        loc = rendered.rindex(final_message.strip())
        if rendered[loc:loc + len(final_message.lstrip())] == final_message:
            rendered = rendered[:loc + len(final_message.lstrip())]
        else:
            rendered = rendered[:loc + len(final_message.strip())]
    return rendered


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--template", required=True)
    parser.add_argument("--conversations")
    parser.add_argument("--bos-token", default="<bos>")
    parser.add_argument("--eos-token", default="<eos>")
    parser.add_argument("--vllm-messages", action="store_true")
    parser.add_argument("--content-format", choices=["auto", "string", "openai"], default="auto")
    parser.add_argument("--detect-content-format", action="store_true")
    args = parser.parse_args()
    with open(args.template, encoding="utf-8") as f:
        source = f.read()
    if args.detect_content_format:
        print(json.dumps(detect_content_format(source)))
        return
    if not args.conversations:
        parser.error("--conversations is required")
    with open(args.conversations, encoding="utf-8") as f:
        conversations = json.load(f)
    template = make_environment().from_string(source)
    content_format = None
    if args.vllm_messages:
        content_format = (detect_content_format(source) if args.content_format == "auto"
                          else args.content_format)
    results = []
    for conversation in conversations:
        try:
            results.append(render(template, conversation, args.bos_token, args.eos_token,
                                  content_format))
        except Exception as e:  # the C++ side reports every failure as an error entry too
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
