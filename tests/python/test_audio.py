"""Audio in gemmaserve.LLM on the tiny unified preset (the 12B's encoder-free audio embedder)
with the real vocabulary: vLLM's multi_modal_data {"audio": (samples, sample_rate)} in every
accepted form gives the prompt and greedy tokens of LLM.chat with the same WAV file (decoded,
down-mixed and resampled by the server's code), ceil(samples / 640) soft tokens per clip, other
rates through the server's resampler, several clips, and exact errors."""

from __future__ import annotations

import base64
import math
import wave
from pathlib import Path
from typing import Any, Dict, List

import pytest

from gemmaserve import LLM, SamplingParams, _gemmaserve

from conftest import SMALL_ENGINE, SOURCE_DIR

np = pytest.importorskip("numpy", reason="python3-numpy (scripts/setup installs it)")

AUDIO = SOURCE_DIR / "tests" / "data" / "audio"
SPEECH = AUDIO / "speech_16k_mono_s16.wav"  # 27200 frames at 16 kHz: 43 soft tokens
BLIP = AUDIO / "blip_16k_mono_s16.wav"  # 1234 frames: 2
STEREO = AUDIO / "stereo_16k_s16.wav"  # 35200 frames x 2 channels: 55
TONE = AUDIO / "tone_22k05_mono_s16.wav"  # 17640 frames at 22.05 kHz -> 12800 at 16 kHz: 20
# logprobs=0: the cumulative logprob tells clips apart that give the same few tokens.
GREEDY = SamplingParams(temperature=0, ignore_eos=True, max_tokens=4, logprobs=0)
FRAME = 640  # samples per soft token of the unified audio embedder (its audio_embed_dim)


def pcm16(path: Path) -> Any:
    """A 16-bit WAV's samples as int16, (frames,) or (frames, channels) as soundfile reads."""
    with wave.open(str(path)) as w:
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        channels = w.getnchannels()
    return samples if channels == 1 else samples.reshape(-1, channels)


def rate_of(path: Path) -> int:
    with wave.open(str(path)) as w:
        return w.getframerate()


def ask(*parts: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": "What is this?"}]}]


def input_audio(path: Path) -> Dict[str, Any]:
    return {"type": "input_audio",
            "input_audio": {"data": base64.b64encode(path.read_bytes()).decode(), "format": "wav"}}


def soft_tokens(samples_16k: int) -> int:
    return math.ceil(samples_16k / FRAME)


def assert_same_answer(out: Any, chat: Any, what: str = "") -> None:
    assert out.prompt_token_ids == chat.prompt_token_ids, what
    assert out.outputs[0].token_ids == chat.outputs[0].token_ids, what
    assert out.outputs[0].cumulative_logprob == chat.outputs[0].cumulative_logprob, what


@pytest.fixture(scope="module")
def unified(unified_chat_model: str) -> LLM:
    return LLM(unified_chat_model, limit_mm_per_prompt={"audio": 2}, **SMALL_ENGINE)


def audio_token(llm: LLM) -> int:
    return llm.get_tokenizer().convert_tokens_to_ids("<|audio|>")


def generate_like_chat(llm: LLM, messages: List[Dict[str, Any]], clips: Any) -> List[Any]:
    """The chat's rendered ids as a token prompt with `clips` as multi_modal_data."""
    ids = llm.get_tokenizer().apply_chat_template(messages, add_generation_prompt=True)
    return [{"prompt_token_ids": ids, "multi_modal_data": {"audio": c}} for c in clips]


def test_every_sample_form_gives_the_tokens_of_the_wav_in_chat(unified: LLM) -> None:
    messages = ask(input_audio(SPEECH))
    chat = unified.chat(messages, GREEDY, use_tqdm=False)[0]
    int16 = pcm16(SPEECH)
    floats = int16.astype(np.float32) / 32768
    forms = [(int16, 16000), (floats, 16000), (floats.astype(np.float64), 16000),
             (floats.tolist(), 16000), [(floats, 16000.0)], (floats, np.int64(16000))]
    outs = unified.generate(generate_like_chat(unified, messages, forms), GREEDY, use_tqdm=False)
    assert chat.prompt_token_ids.count(audio_token(unified)) == soft_tokens(27200) == 43
    for n, out in enumerate(outs):
        assert_same_answer(out, chat, f"form {n}")
    assert unified.num_unfinished_requests() == 0


def test_stereo_is_averaged_in_either_layout(unified: LLM) -> None:
    messages = ask(input_audio(STEREO))
    chat = unified.chat(messages, GREEDY, use_tqdm=False)[0]
    frames = pcm16(STEREO)
    assert frames.shape == (35200, 2)
    forms = [(frames, 16000), (np.ascontiguousarray(frames.T), 16000),
             ((frames.astype(np.float32) / 32768), 16000)]
    outs = unified.generate(generate_like_chat(unified, messages, forms), GREEDY, use_tqdm=False)
    assert chat.prompt_token_ids.count(audio_token(unified)) == soft_tokens(35200) == 55
    for n, out in enumerate(outs):
        assert_same_answer(out, chat, f"form {n}")
    # One channel alone is another clip: the average is what the server sends too.
    left = unified.generate(generate_like_chat(unified, messages, [(frames[:, 0], 16000)]),
                            GREEDY, use_tqdm=False)[0]
    assert left.outputs[0].cumulative_logprob != chat.outputs[0].cumulative_logprob


def test_other_rates_go_through_the_servers_resampler(unified: LLM) -> None:
    # 22.05 kHz: the chat path decodes the WAV and resamples it with libsoxr; the same samples
    # given with their rate are resampled by the same code, so the tokens are equal.
    messages = ask(input_audio(TONE))
    chat = unified.chat(messages, GREEDY, use_tqdm=False)[0]
    tone = pcm16(TONE)
    assert rate_of(TONE) == 22050
    out = unified.generate(generate_like_chat(unified, messages, [(tone, 22050)]), GREEDY,
                           use_tqdm=False)[0]
    assert chat.prompt_token_ids.count(audio_token(unified)) == soft_tokens(12800) == 20
    assert_same_answer(out, chat)

    # The speech clip at 16 kHz and brought down to 8 kHz: ceil(n / 2) samples, which come back
    # to n at 16 kHz, so both are 43 soft tokens.
    speech = pcm16(SPEECH).astype(np.float32) / 32768
    at_8k = np.frombuffer(_gemmaserve.resample_audio(speech.tobytes(), 16000, 8000), np.float32)
    assert len(at_8k) == math.ceil(len(speech) / 2) == 13600
    prompt = "Listen: <|audio|> What is this?"
    outs = unified.generate([{"prompt": prompt, "multi_modal_data": {"audio": clip}}
                             for clip in [(speech, 16000), (at_8k, 8000)]], GREEDY,
                            use_tqdm=False)
    for out in outs:
        assert out.prompt_token_ids.count(audio_token(unified)) == soft_tokens(27200)
    assert len(outs[0].prompt_token_ids) == len(outs[1].prompt_token_ids)
    assert outs[1].outputs[0].finish_reason == "length"


def test_two_clips_in_order_and_chat_audio_url(unified: LLM) -> None:
    url = "data:audio/wav;base64," + base64.b64encode(BLIP.read_bytes()).decode()
    messages = ask(input_audio(SPEECH), {"type": "audio_url", "audio_url": {"url": url}})
    chat = unified.chat(messages, GREEDY, use_tqdm=False)[0]
    clips = [(pcm16(SPEECH), 16000), (pcm16(BLIP), 16000)]
    out = unified.generate(generate_like_chat(unified, messages, [clips]), GREEDY,
                           use_tqdm=False)[0]
    token = audio_token(unified)
    assert chat.prompt_token_ids.count(token) == soft_tokens(27200) + soft_tokens(1234) == 45
    assert_same_answer(out, chat)
    # The clips fill the placeholders in order: the swapped pair expands to other runs.
    swapped = unified.generate(generate_like_chat(unified, messages, [clips[::-1]]), GREEDY,
                               use_tqdm=False)[0]
    assert swapped.prompt_token_ids != chat.prompt_token_ids
    assert sorted(swapped.prompt_token_ids) == sorted(chat.prompt_token_ids)


def test_resample_audio_binding() -> None:
    tone = (pcm16(TONE).astype(np.float32) / 32768).tobytes()
    out = np.frombuffer(_gemmaserve.resample_audio(tone, 22050, 16000), np.float32)
    assert len(out) == 12800
    assert _gemmaserve.resample_audio(tone, 16000, 16000) == tone
    with pytest.raises(ValueError) as e:
        _gemmaserve.resample_audio(tone, 0, 16000)
    assert str(e.value) == "cannot resample audio from 0 Hz to 16000 Hz"
    with pytest.raises(ValueError) as e:
        _gemmaserve.resample_audio(b"abc", 8000, 16000)
    assert str(e.value) == "audio samples must be float32 bytes, got 3 bytes"


def test_audio_errors(unified: LLM) -> None:
    ok = pcm16(BLIP)
    prompt = [2, audio_token(unified)]  # <bos> <|audio|>
    cases = [
        ((ok, 0), ValueError,
         "prompt 0: audio clip 0: the sample rate must be a positive whole number of Hz, got 0"),
        ((ok, -8000), ValueError,
         "prompt 0: audio clip 0: the sample rate must be a positive whole number of Hz, got "
         "-8000"),
        ((ok, 16000.5), ValueError,
         "prompt 0: audio clip 0: the sample rate must be a positive whole number of Hz, got "
         "16000.5"),
        ((ok, "16000"), TypeError,
         "prompt 0: audio clip 0: the sample rate must be a number of Hz, got str"),
        ((ok.astype(np.int32), 16000), TypeError,
         "prompt 0: audio clip 0: samples of dtype int32 are not supported; give float32, "
         "float64 or int16 (16-bit PCM)"),
        ((np.zeros((2, 2, 2), np.float32), 16000), ValueError,
         "prompt 0: audio clip 0: samples must be 1-D (mono) or 2-D (frames, channels), got "
         "shape (2, 2, 2)"),
        ((np.zeros(0, np.float32), 16000), ValueError, "prompt 0: audio clip 0 is empty"),
        (([], 16000), ValueError, "prompt 0: audio clip 0 is empty"),
        ((["0.5"], 16000), TypeError,
         "prompt 0: audio clip 0: a list of samples must hold numbers only (mono floats)"),
        ((b"RIFF", 16000), TypeError,
         "prompt 0: audio clip 0: samples must be a numpy array (float32, float64 or int16) or "
         "a list of floats, got bytes"),
        (None, TypeError,
         "prompt 0: multi_modal_data['audio'] takes a (samples, sample_rate) tuple or a list of "
         "them, got NoneType (pass (samples, 16000) for samples at 16 kHz)"),
        (ok, TypeError,
         "prompt 0: multi_modal_data['audio'] takes a (samples, sample_rate) tuple or a list of "
         "them, got ndarray (pass (samples, 16000) for samples at 16 kHz)"),
        ([ok], TypeError,
         "prompt 0: audio clip 0 must be a (samples, sample_rate) tuple, got ndarray"),
        ([(ok, 16000), (ok, 16000)], ValueError,
         "prompt 0: Found 1 <|audio|> token in the prompt but 2 audio clips were given; the "
         "prompt needs one <|audio|> per audio clip, in order"),
        ([(ok, 16000)] * 3, ValueError,
         "prompt 0: At most 2 audio(s) may be provided in one prompt. Set "
         "`--limit-mm-per-prompt` to increase this limit."),
        ((np.zeros(2000, np.float32), 1), ValueError,
         "prompt 0: audio clip 0: audio is 2000.0 s long; the limit is 1800 s"),
    ]
    for audio, error, message in cases:
        with pytest.raises(error) as e:
            unified.generate({"prompt_token_ids": prompt, "multi_modal_data": {"audio": audio}},
                             GREEDY, use_tqdm=False)
        assert str(e.value) == message
    with pytest.raises(ValueError) as e:
        unified.generate({"prompt_token_ids": prompt, "multi_modal_data": {
            "audio": (ok, 16000), "speech": ok}}, GREEDY, use_tqdm=False)
    assert str(e.value).startswith("prompt 0: multi_modal_data takes {'image': ..., 'audio': "
                                   "..., 'video': ...} only (Gemma 4's modalities), got ")
    assert unified.num_unfinished_requests() == 0


def test_a_model_without_audio_refuses_it(chat_model: str) -> None:
    llm = LLM(chat_model, **SMALL_ENGINE)
    refusal = (f"prompt 0: This model does not accept audio input: {chat_model} has no audio "
               "embedder.")
    token = llm.get_tokenizer().convert_tokens_to_ids("<|audio|>")
    with pytest.raises(ValueError) as e:
        llm.generate({"prompt_token_ids": [2, token], "multi_modal_data": {
            "audio": (pcm16(BLIP), 16000)}}, GREEDY, use_tqdm=False)
    assert str(e.value) == refusal
    with pytest.raises(ValueError) as e:
        llm.chat(ask(input_audio(BLIP)), GREEDY, use_tqdm=False)
    assert str(e.value) == refusal
    assert llm.num_unfinished_requests() == 0
