#!/usr/bin/python3
"""Renders a chat template for each conversation the way transformers' apply_chat_template does.

Run with Debian's /usr/bin/python3 and python3-jinja2. The environment matches Hugging Face's:
ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols), its tojson,
raise_exception and strftime_now, the {% generation %} tag as a no-op, and continue_final_message
cut as transformers cuts it.

usage: render_chat_template.py --template FILE --conversations FILE.json
                               [--bos-token TEXT] [--eos-token TEXT] [--vllm-messages]
Prints a JSON array: the rendered string per conversation, or {"error": message}.
--vllm-messages first post-processes the messages as vLLM's chat_utils does before it renders
(tool-call arguments strings -> objects, text-part tool results -> one string): what gemmaserve's
server and LLM::chat render.
"""
import argparse
import json
import sys
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


def vllm_messages(messages):
    """The messages as vLLM hands them to the template (a deep copy)."""
    messages = json.loads(json.dumps(messages))
    for message in messages:
        if message["role"] == "assistant" and "tool_calls" in message:
            if not message["tool_calls"]:
                del message["tool_calls"]
                continue
            for call in message["tool_calls"]:
                call["function"]["arguments"] = vllm_arguments(call["function"].get("arguments"))
        elif message["role"] == "tool":
            content = message.get("content")
            if content is None:
                message["content"] = ""
            elif isinstance(content, list) and all(p.get("type") == "text" for p in content):
                message["content"] = "\n".join(p["text"] for p in content
                                                if isinstance(p.get("text"), str))
    return messages


def render(template, conversation, bos_token, eos_token, vllm=False):
    add_generation_prompt = conversation.get("add_generation_prompt", False)
    continue_final_message = conversation.get("continue_final_message", False)
    if continue_final_message and add_generation_prompt:
        raise ValueError(
            "continue_final_message and add_generation_prompt are not compatible. Use "
            "continue_final_message when you want the model to continue the final message, and "
            "add_generation_prompt when you want to add a header that will prompt it to start a "
            "new assistant message instead.")
    chat = conversation.get("messages", [])
    if vllm:
        chat = vllm_messages(chat)
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
    parser.add_argument("--conversations", required=True)
    parser.add_argument("--bos-token", default="<bos>")
    parser.add_argument("--eos-token", default="<eos>")
    parser.add_argument("--vllm-messages", action="store_true")
    args = parser.parse_args()
    with open(args.template, encoding="utf-8") as f:
        source = f.read()
    with open(args.conversations, encoding="utf-8") as f:
        conversations = json.load(f)
    template = make_environment().from_string(source)
    results = []
    for conversation in conversations:
        try:
            results.append(render(template, conversation, args.bos_token, args.eos_token,
                                  args.vllm_messages))
        except Exception as e:  # the C++ side reports every failure as an error entry too
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
