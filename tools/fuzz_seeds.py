#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/TARGET/seed-*) from the tests' data.

Inputs are laid out as each target's FuzzedDataProvider reads them: strings from the front
(ConsumeRandomLengthString ends at a backslash followed by another character), integers and
booleans from the back. Run it again after changing a target's input layout.
"""
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"seed-{name}").write_bytes(data if isinstance(data, bytes) else data.encode())


def fdp_string(text):
    """A ConsumeRandomLengthString field: backslashes doubled, then the terminator."""
    return text.encode().replace(b"\\", b"\\\\") + b"\\ "


def main():
    # request: first byte % 3 selects completions, chat or /tokenize, then the body.
    bodies = [
        (0, {"model": "m", "prompt": "Hello", "max_tokens": 5, "temperature": 0}),
        (0, {"prompt": [[1, 2, 3], "text"], "n": 2, "logprobs": 3, "echo": True, "stop": ["\n"]}),
        (0, {"prompt": "x", "stream": True, "stream_options": {"include_usage": True},
             "logit_bias": {"5": 10}, "seed": 7, "best_of": 1}),
        (1, {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
        (1, {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}],
             "logprobs": True, "top_logprobs": 2, "response_format": {"type": "json_object"}}),
        (1, {"messages": [{"role": "user", "content": "w"}], "tool_choice": "auto",
             "tools": [{"type": "function", "function": {"name": "get", "parameters":
             {"type": "object", "properties": {"a": {"type": "string"}}}}}]}),
        (1, {"messages": [{"role": "user", "content": "j"}], "response_format": {
             "type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "integer"}}},
             "chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "low"}),
        (2, {"model": "demo", "prompt": "Hello world", "return_token_strs": True}),
        (2, {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "What is 2+2?"}],
             "add_generation_prompt": True}),
        (2, {"messages": [{"role": "user", "content": "x"}],
             "chat_template": "{% for m in messages %}{{ m.content|upper }}{% endfor %}"}),
    ]
    for i, (sel, body) in enumerate(bodies):
        write("request", str(i), bytes([sel]) + json.dumps(body).encode())

    # template: template text, messages JSON, then add_generation_prompt and use_demo bytes.
    convs = json.loads((ROOT / "tests/data/chat_templates/conversations.json").read_text())
    templates = sorted((ROOT / "tests/data/chat_templates").glob("*.jinja"))
    for i, t in enumerate(templates):
        conv = convs[i % len(convs)]
        write("template", t.stem, fdp_string(t.read_text()) + json.dumps(conv["messages"]).encode()
              + b"\x01\x00")
    write("template", "demo", json.dumps(convs[2]["messages"]).encode() + b"\x01\x01")

    # tool_call / reasoning: model text, then the chunking seed (and reasoning's start flag).
    cases = json.loads((ROOT / "tests/data/parsers/rendered_tool_calls.json").read_text())["cases"]
    for i, c in enumerate(cases[:8]):
        write("tool_call", c["case"], c["model_text"].encode() + struct.pack("<Q", 12345 + i))
    thoughts = ["<|channel>thought\nLet me think.<channel|>The answer is 4.",
                "thought\nhidden<channel|>shown", "<|channel>thought\nplan<|tool_call>call:f{}",
                "plain text with <channel|> stray"]
    for i, t in enumerate(thoughts):
        write("reasoning", str(i), t.encode() + struct.pack("<Q", 99 + i) + b"\x00")

    # json_object: bytes.
    for i, t in enumerate(['{"a": [1, -2.5e3, true, null], "b": {"c": "\\u00e9"}}', "{}",
                           '{"k":"v" , "n" :0}']):
        write("json_object", str(i), t)

    # structured: spec, then the output (a string field), then the kind (0..3) from the back.
    specs = [(0, '{"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}},'
                 ' "required": ["n"]}', '{"n": 5}'),
             (0, '{"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}', '["a"]'),
             (1, r"[a-z]{2,5}\d+(foo|bar)?", "ab12"),
             (2, '["yes", "no"]', "yes"),
             (3, 'root ::= "x" item*\nitem ::= [0-9] | "(" root ")"', "x1(x)")]
    for i, (kind, spec, out) in enumerate(specs):
        write("structured", str(i), fdp_string(out) + spec.encode() + bytes([kind]))

    # image: option byte, then the file.
    for img in sorted((ROOT / "tests/data/images").glob("*.png")):
        write("image", img.stem, b"\x00" + img.read_bytes())

    # image_processor: pixel bytes, then height, width, budget, pooling, patch (from the back).
    write("image_processor", "0", bytes(range(48)) + struct.pack("<HHBBB", 40, 30, 16, 2, 15))

    # bpe: text, then (from the back) skip_special and parse_special.
    for i, t in enumerate(["Hello, world! 2+2=4", "<bos>tokens <|tool_call> \xff\xfe bytes",
                           "  leading spaces\nand\ttabs ∑ unicode"]):
        write("bpe", str(i), fdp_string(t) + bytes([0, 1, 2, 3, 4, 5]) + b"\x00\x01")

    # tokenizer_json: config, text, then the tokenizer.json.
    demo = ROOT / "models/gemma4-demo"
    write("tokenizer_json", "demo", fdp_string((demo / "tokenizer_config.json").read_text())
          + fdp_string("Hello <bos>") + (demo / "tokenizer.json").read_bytes())

    # safetensors: a tiny file (header + data).
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                         "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}).encode()
    write("safetensors", "0", struct.pack("<Q", len(header)) + header + bytes(22))

    # gguf: version 3 with a string, an array vocabulary and one tensor.
    def gstr(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b
    kv = gstr("general.architecture") + struct.pack("<I", 8) + gstr("gemma4")
    tokens = ["<pad>", "<eos>", "<bos>", "a", "b", "ab"]
    kv += gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, len(tokens))
    kv += b"".join(gstr(t) for t in tokens)
    kv += gstr("tokenizer.ggml.model") + struct.pack("<I", 8) + gstr("llama")
    tensor = gstr("t") + struct.pack("<I", 1) + struct.pack("<Q", 4) + struct.pack("<I", 0)
    tensor += struct.pack("<Q", 0)
    body = b"GGUF" + struct.pack("<IQQ", 3, 1, 3) + kv + tensor
    body += bytes((-len(body)) % 32) + bytes(16)
    write("gguf", "0", body)


if __name__ == "__main__":
    main()
