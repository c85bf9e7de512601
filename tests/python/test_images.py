"""Images in gemmaserve.LLM.generate (vLLM's multi_modal_data) on the tiny vision checkpoint:
a PIL image, encoded bytes and a path give the tokens `gemmaserve generate --image` gives, several
images per prompt, a prompt's own mm_processor_kwargs, the image limit and bad images."""

from __future__ import annotations

import json
import shutil

import pytest

from gemmaserve import LLM, SamplingParams

from conftest import SMALL_ENGINE, SOURCE_DIR, golden_model, run_binary

PIL = pytest.importorskip("PIL.Image", reason="python3-pil (scripts/setup installs it)")

IMAGES = SOURCE_DIR / "tests" / "data" / "images"
NOISE = IMAGES / "noise_20x12.png"  # 60 soft tokens at max_soft_tokens 70
GRADIENT = IMAGES / "gradient_16x16.png"  # 64
PROMPT = [2, 178, 507, 214]  # <bos> x <|image|> y (the fixture's ids)
GREEDY = SamplingParams(temperature=0, ignore_eos=True, max_tokens=6)


@pytest.fixture(scope="module")
def vision() -> LLM:
    return LLM(golden_model("vision"), mm_processor_kwargs={"max_soft_tokens": 70},
               limit_mm_per_prompt={"image": 2}, **SMALL_ENGINE)


def cli_tokens(*args: str) -> list:
    out = run_binary("generate", golden_model("vision"), "--max-tokens", "6", "--temperature",
                     "0", "--ignore-eos", "--json", "--max-model-len", "256",
                     "--kv-cache-memory-bytes", str(16 << 20), "--threads", "2",
                     "--mm-processor-kwargs", '{"max_soft_tokens": 70}', *args)
    return [json.loads(line)["token_ids"] for line in out.splitlines() if line.strip()]


def test_pil_bytes_and_path_give_the_cli_tokens(vision: LLM) -> None:
    with PIL.open(NOISE) as pil:
        pil.load()
    forms = [pil, NOISE.read_bytes(), str(NOISE), [NOISE]]
    outputs = vision.generate([{"prompt_token_ids": PROMPT, "multi_modal_data": {"image": f}}
                               for f in forms], GREEDY, use_tqdm=False)
    expected = cli_tokens("--prompt-ids", ",".join(map(str, PROMPT)), "--image", str(NOISE))[0]
    for form, out in zip(forms, outputs):
        assert out.outputs[0].token_ids == expected, type(form).__name__
        assert len(out.prompt_token_ids) == len(PROMPT) - 1 + (1 + 60 + 1)
        assert out.prompt_token_ids[2:4] == [505, 507]


def test_two_images_and_a_prompt_budget(vision: LLM) -> None:
    two = [2, 507, 30, 507, 31]
    out = vision.generate({"prompt_token_ids": two, "multi_modal_data": {
        "image": [NOISE.read_bytes(), PIL.open(GRADIENT)]}}, GREEDY, use_tqdm=False)[0]
    assert len(out.prompt_token_ids) == len(two) - 2 + (1 + 60 + 1) + (1 + 64 + 1)
    cli = cli_tokens("--prompt-ids", ",".join(map(str, two)), "--image", str(NOISE), "--image",
                     str(GRADIENT))[0]
    assert out.outputs[0].token_ids == cli
    bigger = vision.generate({"prompt_token_ids": PROMPT, "multi_modal_data": {"image": NOISE},
                              "mm_processor_kwargs": {"max_soft_tokens": 140}}, GREEDY,
                             use_tqdm=False)[0]
    assert len(bigger.prompt_token_ids) == len(PROMPT) - 1 + (1 + 135 + 1)


def test_rgba_pil_image_drops_alpha_and_a_file_is_composited_on_white(vision: LLM,
                                                                       tmp_path) -> None:
    # vLLM: a decoded picture goes to Hugging Face's processor, whose convert("RGB") drops the
    # alpha; an image file goes through vLLM's media loader, which pastes it on white.
    rgba = PIL.new("RGBA", (12, 12), (200, 30, 60, 0))
    rgba.putpixel((3, 3), (10, 200, 10, 128))
    path = tmp_path / "rgba.png"
    rgba.save(path)
    on_white = PIL.new("RGB", rgba.size, (255, 255, 255))
    on_white.paste(rgba, mask=rgba.getchannel("A"))
    forms = (rgba, rgba.convert("RGB"), path, on_white)
    sp = SamplingParams(temperature=0, ignore_eos=True, max_tokens=6, logprobs=0)
    outs = [o.outputs[0] for o in vision.generate(
        [{"prompt_token_ids": PROMPT, "multi_modal_data": {"image": f}} for f in forms], sp,
        use_tqdm=False)]
    assert outs[0].token_ids == outs[1].token_ids
    assert outs[0].cumulative_logprob == outs[1].cumulative_logprob
    assert outs[2].token_ids == outs[3].token_ids
    assert outs[2].cumulative_logprob == outs[3].cumulative_logprob
    assert outs[0].cumulative_logprob != outs[2].cumulative_logprob


def test_a_checkpoints_processor_config_sets_the_budget_and_do_convert_rgb(tmp_path) -> None:
    model = tmp_path / "vision"
    shutil.copytree(golden_model("vision"), model)
    (model / "processor_config.json").write_text(json.dumps({"image_processor": {
        "max_soft_tokens": 140, "do_convert_rgb": False}, "image_seq_length": 140}))
    llm = LLM(str(model), **SMALL_ENGINE)
    assert llm._engine.image_processor()["max_soft_tokens"] == 140
    out = llm.generate({"prompt_token_ids": PROMPT, "multi_modal_data": {"image": NOISE}}, GREEDY,
                       use_tqdm=False)[0]
    assert len(out.prompt_token_ids) == len(PROMPT) - 1 + (1 + 135 + 1)
    with pytest.raises(ValueError, match="a PIL image of mode 'RGBA' needs converting to RGB, and "
                                         "the checkpoint's image processor has do_convert_rgb "
                                         "false"):
        llm.generate({"prompt_token_ids": PROMPT, "multi_modal_data": {
            "image": PIL.new("RGBA", (8, 8))}}, GREEDY, use_tqdm=False)


def test_image_errors(vision: LLM) -> None:
    cases = [
        ({"prompt_token_ids": [2, 507, 507, 507], "multi_modal_data": {"image": [NOISE] * 3}},
         "prompt 0: At most 2 image(s) may be provided in one prompt. Set "
         "`--limit-mm-per-prompt` to increase this limit."),
        ({"prompt_token_ids": [2, 507, 507], "multi_modal_data": {"image": NOISE}},
         "prompt 0: Found 2 <|image|> tokens in the prompt but 1 image was given"),
        ({"prompt_token_ids": PROMPT, "multi_modal_data": {"image": b"not an image"}},
         "prompt 0: image 0: unsupported image format: expected PNG, JPEG, WebP or GIF data"),
        ({"prompt_token_ids": PROMPT, "multi_modal_data": {"image": NOISE, "images": NOISE}},
         "prompt 0: multi_modal_data takes {'image': ..., 'audio': ..., 'video': ...} only"),
        ({"prompt_token_ids": PROMPT, "multi_modal_data": {"image": NOISE},
          "mm_processor_kwargs": {"max_soft_tokens": 100}},
         "`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got 100."),
    ]
    for prompt, message in cases:
        with pytest.raises(ValueError) as e:
            vision.generate(prompt, GREEDY, use_tqdm=False)
        assert message in str(e.value)
    assert vision.num_unfinished_requests() == 0
