"""gemmaserve.LLM on the golden tiny checkpoints (token-id prompts, no shared data needed):
greedy tokens equal the CLI's and Hugging Face's, n > 1, logprobs, stops, the GIL released,
Ctrl+C, one LLM serving many calls, the progress bar and the error messages."""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time

import pytest

import gemmaserve
from gemmaserve import LLM, SamplingParams
from gemmaserve import _progress

from conftest import SMALL_ENGINE, SOURCE_DIR, golden_model, require_shared, run_binary

GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def dense() -> LLM:
    return LLM(golden_model("dense"), **SMALL_ENGINE)


def golden_cases(name: str) -> list:
    ref = SOURCE_DIR / "tests" / "data" / "golden" / "ref" / f"{name}.json"
    return json.loads(ref.read_text())["cases"]


@pytest.mark.parametrize("name", ["dense", "dense-clm", "keqv", "moe"])
def test_greedy_tokens_equal_cli_and_reference(name: str) -> None:
    cases = golden_cases(name)
    llm = LLM(golden_model(name), **SMALL_ENGINE)
    prompts = [{"prompt_token_ids": c["prompt_ids"]} for c in cases]
    outputs = llm.generate(prompts, SamplingParams(max_tokens=16, **GREEDY), use_tqdm=False)
    cli_args = ["generate", golden_model(name), "--max-tokens", "16", "--temperature", "0",
                "--ignore-eos", "--json", "--max-model-len", "256", "--kv-cache-memory-bytes",
                str(16 << 20), "--threads", "2"]
    for c in cases:
        cli_args += ["--prompt-ids", ",".join(map(str, c["prompt_ids"]))]
    cli = [json.loads(line) for line in run_binary(*cli_args).splitlines() if line.strip()]
    assert len(cli) == len(cases) == len(outputs)
    for case, out, cli_out in zip(cases, outputs, cli):
        assert out.prompt_token_ids == case["prompt_ids"]
        assert out.outputs[0].token_ids == cli_out["token_ids"], case["name"]
        assert out.outputs[0].token_ids == case["greedy"]["new_tokens"], case["name"]
        assert out.outputs[0].finish_reason == cli_out["finish_reason"] == "length"


def test_one_llm_serves_many_calls_and_token_prompt_forms(dense: LLM) -> None:
    sp = SamplingParams(max_tokens=6, **GREEDY)
    ids = [2, 175, 50, 120]
    first = dense.generate({"prompt_token_ids": ids}, sp, use_tqdm=False)
    # A flat id list is one prompt (vLLM's legacy form); lists of ids and dicts mix.
    again = dense.generate(ids, sp, use_tqdm=False)
    mixed = dense.generate([ids, {"prompt_token_ids": [2, 9], "prompt": "echoed"}], sp,
                           use_tqdm=False)
    assert first[0].outputs[0].token_ids == again[0].outputs[0].token_ids
    assert mixed[0].outputs[0].token_ids == first[0].outputs[0].token_ids
    assert first[0].prompt is None and mixed[1].prompt == "echoed"
    assert mixed[1].prompt_token_ids == [2, 9]
    # Request ids keep counting across calls, as vLLM's counter.
    assert int(mixed[1].request_id) > int(first[0].request_id)
    assert dense.num_unfinished_requests() == 0


def test_sampling_params_per_prompt_and_max_tokens_none() -> None:
    llm = LLM(golden_model("dense"), max_model_len=32, kv_cache_memory_bytes=8 << 20, threads=2)
    outs = llm.generate([[2, 5, 6], [2, 7]],
                        [SamplingParams(max_tokens=3, **GREEDY),
                         SamplingParams(max_tokens=None, **GREEDY)], use_tqdm=False)
    assert len(outs[0].outputs[0].token_ids) == 3
    # max_tokens=None: up to the context length (32 - 2 prompt tokens).
    assert len(outs[1].outputs[0].token_ids) == 30
    assert outs[1].outputs[0].finish_reason == "length"


def test_n_samples_with_seed(dense: LLM) -> None:
    sp = SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=8, ignore_eos=True)
    a = dense.generate([[2, 100, 200]], sp, use_tqdm=False)[0]
    b = dense.generate([[2, 100, 200]], sp, use_tqdm=False)[0]
    assert [o.index for o in a.outputs] == [0, 1, 2]
    assert all(len(o.token_ids) == 8 for o in a.outputs)
    assert [o.token_ids for o in a.outputs] == [o.token_ids for o in b.outputs]
    assert len({tuple(o.token_ids) for o in a.outputs}) > 1  # the samples differ


def test_logprobs_and_prompt_logprobs(dense: LLM) -> None:
    prompt = [2, 175, 50, 120, 195]
    sp = SamplingParams(max_tokens=4, logprobs=3, prompt_logprobs=2, **GREEDY)
    out = dense.generate({"prompt_token_ids": prompt}, sp, use_tqdm=False)[0]
    o = out.outputs[0]
    assert len(o.logprobs) == 4
    for token, lp in zip(o.token_ids, o.logprobs):
        assert token in lp and len(lp) == 3  # greedy: the chosen token is the top one
        assert lp[token].rank == 1
        assert sorted(x.rank for x in lp.values()) == [1, 2, 3]
        assert all(x.logprob <= 0 for x in lp.values())
    assert math.isclose(o.cumulative_logprob, sum(lp[t].logprob for t, lp in
                                                  zip(o.token_ids, o.logprobs)))
    assert len(out.prompt_logprobs) == len(prompt) and out.prompt_logprobs[0] is None
    for pos in range(1, len(prompt)):
        entry = out.prompt_logprobs[pos]
        assert prompt[pos] in entry and len(entry) in (2, 3)
        if len(entry) == 3:  # the prompt token was outside the top 2: its rank is unknown
            assert entry[prompt[pos]].rank is None
    # The CLI prints the same numbers.
    cli = json.loads(run_binary("generate", golden_model("dense"), "--prompt-ids",
                                ",".join(map(str, prompt)), "--max-tokens", "4",
                                "--temperature", "0", "--ignore-eos", "--logprobs", "3",
                                "--prompt-logprobs", "2", "--json", "--max-model-len", "256",
                                "--kv-cache-memory-bytes", str(16 << 20)))
    for lp, cli_lp in zip(o.logprobs, cli["logprobs"]):
        assert {k: pytest.approx(v.logprob) for k, v in lp.items()} == \
            {int(k): v for k, v in cli_lp.items()}
    no_logprobs = dense.generate([prompt], SamplingParams(max_tokens=2, **GREEDY),
                                 use_tqdm=False)[0]
    assert no_logprobs.outputs[0].logprobs is None
    assert no_logprobs.outputs[0].cumulative_logprob is None
    assert no_logprobs.prompt_logprobs is None


def test_stop_token_ids(dense: LLM) -> None:
    sp = SamplingParams(max_tokens=16, **GREEDY)
    tokens = dense.generate([[2, 175, 50]], sp, use_tqdm=False)[0].outputs[0].token_ids
    stop = tokens[3]
    first = tokens.index(stop)
    out = dense.generate([[2, 175, 50]], SamplingParams(max_tokens=16, stop_token_ids=[stop],
                                                         **GREEDY), use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == stop
    assert out.token_ids == tokens[:first + 1]


def test_gil_is_released_while_generating(dense: LLM) -> None:
    counter = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    calls = during = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < 0.3:  # long enough to tell on any machine
            before = counter[0]
            dense.generate([[2, i, i + 1] for i in range(3, 19)],
                           SamplingParams(max_tokens=48, **GREEDY), use_tqdm=False)
            during += counter[0] - before
            calls += 1
    finally:
        stop.set()
        thread.join()
    # The counting thread ran all along: with the GIL held by generate it could not count.
    assert during > 10000, f"the Python thread counted {during} during {calls} generate calls"


def test_ctrl_c_aborts_the_call_cleanly() -> None:
    # 32 prompts of 4000 tokens: minutes of work, so only an abort ends the call in time.
    llm = LLM(golden_model("dense"), max_model_len=4096, kv_cache_memory_bytes=64 << 20,
              threads=2)
    sp = SamplingParams(max_tokens=4000, **GREEDY)
    prompts = [[2, i] for i in range(3, 35)]

    def interrupt_once_running() -> None:  # Ctrl+C as soon as the engine holds the requests
        deadline = time.monotonic() + 30
        while llm.num_unfinished_requests() == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    interrupter = threading.Thread(target=interrupt_once_running)
    interrupter.start()
    steps = llm._engine.num_steps()
    with pytest.raises(KeyboardInterrupt):
        llm.generate(prompts, sp, use_tqdm=False)
    interrupter.join()
    assert llm._engine.num_steps() - steps < 4000  # stopped early: the whole run takes 4000
    assert llm.num_unfinished_requests() == 0  # every request was aborted, blocks returned
    out = llm.generate([[2, 3]], SamplingParams(max_tokens=2, **GREEDY), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 2


def test_progress_bar_like_vllm(dense: LLM, capfd: pytest.CaptureFixture,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    sp = SamplingParams(max_tokens=3, **GREEDY)
    dense.generate([[2, 3], [2, 4]], sp)
    err = capfd.readouterr().err
    assert "Processed prompts: 100%" in err and "2/2" in err
    assert "est. speed input:" in err and "toks/s, output:" in err
    monkeypatch.setattr(_progress, "_tqdm", None)  # no tqdm installed: the plain bar
    dense.generate([[2, 3], [2, 4]], sp)
    err = capfd.readouterr().err
    assert "Processed prompts: 100%|" in err and "| 2/2 [" in err and "est. speed input:" in err
    dense.generate([[2, 3]], sp, use_tqdm=False)
    assert "Processed prompts" not in capfd.readouterr().err


def test_default_sampling_params_and_ignored_arguments(capfd: pytest.CaptureFixture) -> None:
    llm = LLM(golden_model("dense"), trust_remote_code=True,
              compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"}, dtype="bfloat16",
              **SMALL_ENGINE)
    err = capfd.readouterr().err
    assert "LLM(compilation_config={'cudagraph_mode': 'FULL_DECODE_ONLY'}) is accepted" in err
    assert "LLM(trust_remote_code=True) is accepted" in err
    assert "LLM(dtype='bfloat16') is accepted" in err
    defaults = llm.get_default_sampling_params()
    assert isinstance(defaults, SamplingParams) and defaults.max_tokens == 16
    out = llm.generate([[2, 3]], use_tqdm=False)  # no sampling_params: the defaults
    assert len(out[0].outputs[0].token_ids) <= 16


def test_tensor_parallel_outside_mpirun_is_an_error_not_one_rank() -> None:
    with pytest.raises(ValueError) as e:
        LLM(golden_model("dense"), tensor_parallel_size=4, **SMALL_ENGINE)
    assert str(e.value) == (
        "LLM(tensor_parallel_size=4) needs 4 ranks, and this is a process outside mpirun: run the "
        "script under `mpirun -n 4`, serve the model with `gemmaserve serve MODEL "
        "--tensor-parallel-size 4`, or pass tensor_parallel_size=1")


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-1), "temperature must be non-negative, got -1.0."),
    (dict(temperature=3), "temperature must be in [0, 2], got 3.0."),
    (dict(top_p=0), "top_p must be in (0, 1], got 0.0."),
    (dict(top_k=-2), "top_k must be 0 (disable), or at least 1, got -2."),
    (dict(min_p=2), "min_p must be in [0, 1], got 2.0."),
    (dict(presence_penalty=3), "presence_penalty must be in [-2, 2], got 3.0."),
    (dict(repetition_penalty=0), "repetition_penalty must be greater than zero, got 0.0."),
    (dict(max_tokens=0), "max_tokens must be at least 1, got 0."),
    (dict(min_tokens=5, max_tokens=2),
     "min_tokens must be less than or equal to max_tokens=2, got 5."),
    (dict(n=0), "n must be at least 1, got 0."),
    (dict(n=2, temperature=0), "n must be 1 when using greedy sampling, got 2."),
    (dict(logprobs=-2), "logprobs must be non-negative or -1, got -2."),
    (dict(stop=["a", ""]), "stop cannot contain an empty string."),
    (dict(bad_words=["x", ""]), "bad_words cannot contain an empty string. Got "
                                "bad_words=['x', '']"),
    (dict(allowed_token_ids=[]), "allowed_token_ids is not None and empty!"),
    (dict(stop=["x"], detokenize=False), "stop strings are only supported when detokenize is "
                                         "True. Set detokenize=True to use stop."),
])
def test_bad_sampling_params_raise_vllm_messages(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as e:
        SamplingParams(**kwargs)
    assert str(e.value) == message


def test_sampling_params_normalise_like_vllm() -> None:
    sp = SamplingParams(stop="x", seed=-1, stop_token_ids=[5, 5, 6], logprobs=True,
                        temperature=0, top_k=5, top_p=0.5)
    assert sp.stop == ["x"] and sp.seed is None and sp.stop_token_ids == [5, 6]
    assert sp.logprobs == 1 and sp.top_k == 0 and sp.top_p == 1.0
    assert SamplingParams(temperature=0.001).temperature == 0.01
    with pytest.raises(TypeError, match=r"SamplingParams.top_k has the wrong type: float"):
        SamplingParams(top_k=1.5)


def test_bad_generate_arguments_raise_engine_messages(dense: LLM) -> None:
    sp = SamplingParams(max_tokens=4, **GREEDY)
    cases = [
        (lambda: dense.generate([[2, 3], [2, 9999]], sp, use_tqdm=False),
         "prompt 1 holds token id 9999, outside the vocabulary of 512 tokens"),
        (lambda: dense.generate([[2, 3], []], sp, use_tqdm=False), "prompt 1 is empty"),
        (lambda: dense.generate([[2, 3]], [sp, sp], use_tqdm=False),
         "The lengths of prompts and params must be the same."),
        (lambda: dense.generate("Hello", sp, use_tqdm=False),
         "a text prompt needs a tokenizer, and " + golden_model("dense") + " has none"),
        (lambda: dense.generate([[2, 3]], SamplingParams(max_tokens=300, **GREEDY),
                                use_tqdm=False),
         "'max_tokens' or 'max_completion_tokens' is too large: 300. This model's maximum "
         "context length is 256 tokens and your request has 2 input tokens (300 > 256 - 2)."),
        (lambda: dense.generate([[2, 3]], SamplingParams(stop_token_ids=[600]), use_tqdm=False),
         "token_id(s) [600] in stop_token_ids contain out-of-vocab token ids. Vocabulary size: "
         "512"),
        (lambda: dense.generate({"prompt": "x", "multi_modal_data": {"image": None}}, sp,
                                use_tqdm=False),
         "prompt 0: an image must be a PIL image, encoded image bytes or a file path, got "
         "NoneType"),
        (lambda: dense.generate({"prompt_token_ids": [2, 3], "multi_modal_data": {
            "image": str(SOURCE_DIR / "tests" / "data" / "images" / "noise_20x12.png")}}, sp,
            use_tqdm=False),
         "prompt 0: This model does not accept image input: " + golden_model("dense") +
         " has no vision encoder."),
        (lambda: dense.generate([{"text": "x"}], sp, use_tqdm=False),
         "prompt 0 has neither 'prompt' nor 'prompt_token_ids'"),
        (lambda: dense.generate([[2, 3]], SamplingParams(
            structured_outputs=gemmaserve.StructuredOutputsParams(regex="a+")), use_tqdm=False),
         "structured_outputs need a tokenizer, and this model has none"),
        (lambda: dense.chat([{"role": "user", "content": "hi"}], sp, use_tqdm=False),
         "chat needs a tokenizer, and this model has none"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as e:
            call()
        assert message in str(e.value)
    assert dense.num_unfinished_requests() == 0


def test_bad_engine_arguments_raise(tmp_path) -> None:
    with pytest.raises(ValueError, match="no-such-model"):
        LLM(str(tmp_path / "no-such-model"))
    with pytest.raises(ValueError, match="quantization"):
        LLM(golden_model("dense"), quantization="awq", **SMALL_ENGINE)
    with pytest.raises(TypeError, match=r"LLM\(max_num_seqs=...\) has the wrong type"):
        LLM(golden_model("dense"), max_num_seqs="many")


def test_sampling_params_defaults_are_vllms() -> None:
    sp = SamplingParams()
    expected = dict(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0,
                    temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=None, stop=[],
                    stop_token_ids=[], ignore_eos=False, max_tokens=16, min_tokens=0,
                    logprobs=None, prompt_logprobs=None, detokenize=True,
                    skip_special_tokens=True, spaces_between_special_tokens=True,
                    include_stop_str_in_output=False, structured_outputs=None, logit_bias=None,
                    allowed_token_ids=None, extra_args=None, bad_words=[])
    assert {k: getattr(sp, k) for k in expected} == expected


def test_token_masks_reach_the_engine(dense: LLM) -> None:
    biased = dense.generate([[2, 3]], SamplingParams(max_tokens=4, logit_bias={300: 100.0},
                                                     **GREEDY), use_tqdm=False)
    assert biased[0].outputs[0].token_ids == [300] * 4
    allowed = dense.generate([[2, 3]], SamplingParams(max_tokens=6, allowed_token_ids=[5, 6],
                                                      temperature=1.0, seed=1, ignore_eos=True),
                             use_tqdm=False)
    assert set(allowed[0].outputs[0].token_ids) <= {5, 6}
    # min_tokens holds back a stop token until it has generated that many.
    stop = biased[0].outputs[0].token_ids[0]
    held = dense.generate([[2, 3]], SamplingParams(max_tokens=6, min_tokens=3,
                                                   stop_token_ids=[stop], logit_bias={stop: 100.0},
                                                   **GREEDY), use_tqdm=False)[0].outputs[0]
    assert len(held.token_ids) == 4 and held.token_ids[-1] == stop
    assert held.finish_reason == "stop"


def test_data_parallel_replicas_answer_as_one_engine() -> None:
    sp = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    prompts = [[2, 10 + i, 20 + i, 30 + i] for i in range(4)]
    one = LLM(golden_model("dense"), **SMALL_ENGINE).generate(prompts, sp, use_tqdm=False)
    two = LLM(golden_model("dense"), data_parallel_size=2, **SMALL_ENGINE)
    got = two.generate(prompts, sp, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in one]
    with pytest.raises(ValueError, match="^--data-parallel-size must be at least 1, got 0$"):
        LLM(golden_model("dense"), data_parallel_size=0, **SMALL_ENGINE)


def test_speculative_config_keeps_greedy_tokens(dense: LLM) -> None:
    """vLLM's speculative_config dict: ngram drafts verified by the target change no greedy
    token; a bad key is a ValueError naming it."""
    spec = LLM(golden_model("dense"), **SMALL_ENGINE,
               speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                   "prompt_lookup_min": 1})
    prompts = [[2] + [10, 17, 24] * 5, [2, 175, 50, 120]]
    sp = SamplingParams(max_tokens=16, **GREEDY)
    want = [o.outputs[0].token_ids for o in dense.generate(prompts, sp, use_tqdm=False)]
    got = [o.outputs[0].token_ids for o in spec.generate(prompts, sp, use_tqdm=False)]
    assert got == want
    with pytest.raises(ValueError, match="--speculative-config: unknown key 'k'"):
        LLM(golden_model("dense"), **SMALL_ENGINE,
            speculative_config={"method": "ngram", "num_speculative_tokens": 3, "k": 1})


def test_gguf_file_and_mmproj_load_like_the_checkpoint() -> None:
    """LLM(model.gguf) as vllm's LLM takes one: llama.cpp's f32 file of the dense checkpoint gives
    its reference tokens from the file's own tokenizer; mmproj= reaches the loader."""
    gguf = require_shared("fixtures/gguf/models/dense-f32.gguf")
    case = golden_cases("dense")[1]
    llm = LLM(str(gguf), **SMALL_ENGINE)
    out = llm.generate([{"prompt_token_ids": case["prompt_ids"]}],
                       SamplingParams(max_tokens=16, **GREEDY), use_tqdm=False)
    assert out[0].outputs[0].token_ids == case["greedy"]["new_tokens"]
    assert llm.get_tokenizer().encode("Hello")  # the file's own vocabulary
    # mmproj= reaches the loader: a text model given as the projector is refused by name.
    with pytest.raises(ValueError, match="--mmproj needs a multimodal projector GGUF"):
        LLM(str(gguf), mmproj=str(gguf), **SMALL_ENGINE)
