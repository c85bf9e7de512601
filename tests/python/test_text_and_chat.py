"""Text prompts and chat on a tiny random-weight Gemma 4 with the real vocabulary and chat
template: the seed's offline example as written, stop strings, chat with tools, the tokenizer."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gemmaserve
from gemmaserve import LLM, SamplingParams

from conftest import run_binary

SEED_PROMPT = "Explain why graph execution improves decode performance."

# Seed 000_f93e5ada73ecfb3a.txt section 6.3, verbatim but for `vllm` -> `gemmaserve` and the
# model path.
SEED_PROGRAM = textwrap.dedent('''\
    from vllm import LLM, SamplingParams

    llm = LLM(
        model="/root/.cache/path/to/gemma4",
        trust_remote_code=True,
        tensor_parallel_size=4,
        compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"},
    )

    sampling_params = SamplingParams(temperature=0, max_tokens=128)
    outputs = llm.generate(
        ["Explain why graph execution improves decode performance."],
        sampling_params,
    )

    for output in outputs:
        print(output.outputs[0].text)
    ''')

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def llm(chat_model: str) -> LLM:
    return LLM(chat_model, max_model_len=512, kv_cache_memory_bytes=32 << 20, threads=2)


def test_seed_offline_example_runs_with_one_rank(chat_model: str, tmp_path: Path) -> None:
    program = SEED_PROGRAM.replace("from vllm import", "from gemmaserve import")
    program = program.replace("/root/.cache/path/to/gemma4", chat_model)
    assert program.count("gemmaserve") == 1 and chat_model in program
    script = tmp_path / "offline.py"
    # Unchanged, it asks for 4 ranks outside mpirun: a clear error, not one rank quietly.
    script.write_text(program)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, check=False, timeout=300)
    assert run.returncode != 0
    assert "ValueError: LLM(tensor_parallel_size=4) needs 4 ranks" in run.stderr, run.stderr
    script.write_text(program.replace("tensor_parallel_size=4", "tensor_parallel_size=1"))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, check=False, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Processed prompts: 100%" in run.stderr
    cli = json.loads(run_binary("generate", chat_model, "--prompt", SEED_PROMPT, "--max-tokens",
                                "128", "--temperature", "0", "--json"))
    assert cli["text"], "the completion is empty"
    assert run.stdout == cli["text"] + "\n"


def test_text_prompts_get_one_bos_and_echo(llm: LLM) -> None:
    tok = llm.get_tokenizer()
    out = llm.generate(["Hello world", {"prompt": "<bos>Hello world"}],
                       SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                       use_tqdm=False)
    assert out[0].prompt == "Hello world" and out[1].prompt == "<bos>Hello world"
    assert out[0].prompt_token_ids == out[1].prompt_token_ids
    assert out[0].prompt_token_ids[0] == tok.bos_token_id != out[0].prompt_token_ids[1]
    assert out[0].outputs[0].text == tok.decode(out[0].outputs[0].token_ids,
                                                skip_special_tokens=True)
    quiet = llm.generate("Hello world", SamplingParams(temperature=0, max_tokens=4,
                                                       ignore_eos=True, detokenize=False),
                         use_tqdm=False)[0].outputs[0]
    assert quiet.text == "" and quiet.token_ids == out[0].outputs[0].token_ids


def test_stop_strings(llm: LLM) -> None:
    sp = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    text = llm.generate("Hello world", sp, use_tqdm=False)[0].outputs[0].text
    assert len(text) >= 4
    stop = text[len(text) // 2]
    stopped = llm.generate("Hello world", SamplingParams(temperature=0, max_tokens=12,
                                                         ignore_eos=True, stop=stop),
                           use_tqdm=False)[0].outputs[0]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == stop
    assert stopped.text == text[:text.index(stop)]
    kept = llm.generate("Hello world", SamplingParams(temperature=0, max_tokens=12,
                                                      ignore_eos=True, stop=[stop],
                                                      include_stop_str_in_output=True),
                        use_tqdm=False)[0].outputs[0]
    assert kept.text == text[:text.index(stop) + len(stop)]


def test_chat_with_tools(llm: LLM) -> None:
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    sp = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    out = llm.chat(messages, sp, tools=[WEATHER_TOOL], use_tqdm=False)[0]
    # The tools reach the template, and the prompt is what the tokenizer renders.
    assert "get_weather" in out.prompt and "Current weather in a city" in out.prompt
    tok = llm.get_tokenizer()
    rendered = tok.apply_chat_template(messages, tools=[WEATHER_TOOL], tokenize=False,
                                       add_generation_prompt=True)
    assert rendered == out.prompt
    ids = tok.apply_chat_template(messages, tools=[WEATHER_TOOL], add_generation_prompt=True)
    assert out.prompt_token_ids == ids == tok.encode(rendered, add_special_tokens=False)
    same = llm.generate({"prompt_token_ids": ids}, sp, use_tqdm=False)[0]
    assert out.outputs[0].token_ids == same.outputs[0].token_ids
    assert out.outputs[0].text == same.outputs[0].text  # vLLM's chat: the raw generated text
    assert out.outputs[0].message is None
    # parse_output: the server's message split (reasoning, content, tool calls).
    parsed = llm.chat(messages, sp, tools=[WEATHER_TOOL], use_tqdm=False,
                      parse_output=True)[0].outputs[0]
    assert parsed.token_ids == out.outputs[0].token_ids
    assert isinstance(parsed.message, gemmaserve.ChatMessage)
    assert parsed.message.role == "assistant"
    assert parsed.message.finish_reason in ("length", "tool_calls")
    assert "<turn|>" not in (parsed.message.content or "")
    # tool_choice (the server's field) forces the call; the parser returns it as a tool call.
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        forced = llm.chat(messages, SamplingParams(temperature=0, max_tokens=48), use_tqdm=False,
                          tools=[WEATHER_TOOL], tool_choice=choice, parse_output=True)[0]
        call = forced.outputs[0]
        assert call.text.startswith("<|tool_call>call:get_weather{")
        assert [c.name for c in call.message.tool_calls] == ["get_weather"]
        assert isinstance(json.loads(call.message.tool_calls[0].arguments), dict)
        assert call.message.content is None
    for kwargs, message in [
        (dict(tool_choice="required"), "tool_choice 'required' needs tools"),
        (dict(tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "x"}}),
         "tool_choice names 'x', which is not in tools"),
        (dict(tools=[WEATHER_TOOL], tool_choice="sometimes"),
         "tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': "
         "{'name': ...}}, got 'sometimes'"),
    ]:
        with pytest.raises(ValueError) as e:
            llm.chat(messages, sp, use_tqdm=False, **kwargs)
        assert str(e.value) == message
    # Several conversations in one call, one SamplingParams each.
    both = llm.chat([messages, [{"role": "user", "content": "Hi"}]], [sp, sp],
                    tools=[WEATHER_TOOL], use_tqdm=False)
    assert both[0].outputs[0].token_ids == out.outputs[0].token_ids
    assert both[1].prompt.count("Hi") == 1


def test_chat_template_content_format_as_vllm(llm: LLM) -> None:
    # Gemma 4's template loops over message['content']: vLLM detects "openai" and hands it the
    # parts, which it concatenates; "string" joins them with "\n" first.
    messages = [{"role": "user", "content": [{"type": "text", "text": "Hello"},
                                             {"type": "input_text", "text": "world"}]}]
    sp = SamplingParams(temperature=0, max_tokens=1)

    def prompt(content_format: str) -> str:
        return llm.chat(messages, sp, chat_template_content_format=content_format,
                        use_tqdm=False)[0].prompt

    assert "<|turn>user\nHelloworld<turn|>" in prompt("auto")
    assert prompt("openai") == prompt("auto")
    assert "<|turn>user\nHello\nworld<turn|>" in prompt("string")
    with pytest.raises(ValueError) as e:
        prompt("strings")
    assert str(e.value) == ("chat template content format must be one of 'auto', 'string', "
                            "'openai', got 'strings'")


def test_chat_template_kwargs_and_errors(llm: LLM) -> None:
    messages = [{"role": "user", "content": "Hi"}]
    sp = SamplingParams(temperature=0, max_tokens=2)
    plain = llm.chat(messages, sp, use_tqdm=False)[0].prompt
    thinking = llm.chat(messages, sp, chat_template_kwargs={"enable_thinking": True},
                        use_tqdm=False)[0].prompt
    assert plain != thinking
    with pytest.raises(ValueError) as e:
        llm.chat([], sp, use_tqdm=False)
    assert str(e.value) == "messages must be a non-empty list"
    with pytest.raises(ValueError, match="continue_final_message"):
        llm.chat(messages, sp, continue_final_message=True, use_tqdm=False)


def test_tokenizer_like_hugging_face(llm: LLM) -> None:
    tok = llm.get_tokenizer()
    assert tok.vocab_size == len(tok) == 262144
    assert tok.bos_token_id == 2 and tok.eos_token_id == 1
    assert tok.bos_token == "<bos>" and tok.eos_token == "<eos>"
    ids = tok.encode("Hello world")
    assert ids[0] == 2 and tok.encode("Hello world", add_special_tokens=False) == ids[1:]
    assert tok.decode(ids) == "<bos>Hello world"
    assert tok.decode(ids, skip_special_tokens=True) == "Hello world"
    enc = tok("Hello world")
    assert enc["input_ids"] == ids and enc.attention_mask == [1] * len(ids)
    assert tok(["a", "b c"])["input_ids"] == [tok.encode("a"), tok.encode("b c")]
    assert tok.convert_ids_to_tokens(2) == "<bos>"
    with pytest.raises(ValueError):
        tok.decode([262144 + 5])


def test_structured_outputs_json_object(llm: LLM) -> None:
    sp = SamplingParams(temperature=0, max_tokens=8, structured_outputs=gemmaserve.
                        StructuredOutputsParams(json_object=True))
    text = llm.generate("Give me JSON:", sp, use_tqdm=False)[0].outputs[0].text
    assert text.lstrip().startswith("{")


def test_structured_outputs_regex_choice_and_schema(llm: LLM) -> None:
    so = gemmaserve.StructuredOutputsParams
    sp = SamplingParams(temperature=0, max_tokens=16, structured_outputs=so(regex="[a-c]{2,4}x"))
    text = llm.generate("Letters:", sp, use_tqdm=False)[0].outputs[0].text
    assert re.fullmatch("[a-c]{2,4}x", text), text
    sp = SamplingParams(temperature=0, max_tokens=16, structured_outputs=so(choice=["yes", "no"]))
    assert llm.generate("Yes or no?", sp, use_tqdm=False)[0].outputs[0].text in ("yes", "no")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    sp = SamplingParams(temperature=0, max_tokens=128, structured_outputs=so(json=schema))
    text = llm.generate("JSON:", sp, use_tqdm=False)[0].outputs[0].text
    assert isinstance(json.loads(text)["ok"], bool), text
    with pytest.raises(ValueError) as e:
        llm.generate("x", SamplingParams(structured_outputs=so(regex="a(")), use_tqdm=False)
    assert "invalid regex at position 2: missing ), unterminated subpattern" in str(e.value)


def test_bad_words_are_never_completed(llm: LLM) -> None:
    sp = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    first = llm.generate("Hello world", sp, use_tqdm=False)[0].outputs[0]
    tok = llm.get_tokenizer()
    word = tok.decode(first.token_ids[:1]).strip()
    assert word, "the first token is blank"
    banned = llm.generate("Hello world", SamplingParams(temperature=0, max_tokens=6,
                                                        ignore_eos=True, bad_words=[word]),
                          use_tqdm=False)[0].outputs[0]
    assert banned.token_ids[0] != first.token_ids[0]
    assert word not in banned.text
