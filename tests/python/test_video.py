"""Videos in gemmaserve.LLM (vLLM's multi_modal_data {"video": ...}, LLM(media_io_kwargs=...),
chat video_url parts) on the tiny vision checkpoint with the demo model's tokenizer (the frames'
"mm:ss" stamps are text): every form of a video gives the bits of its frames as images in the
expanded layout, a clip by path or bytes gives the frames PyAV decodes, the loader's sampling
options set the frame count, and bad videos are refused by prompt and video."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, List, Tuple

import pytest

from gemmaserve import LLM, SamplingParams

from conftest import SMALL_ENGINE, SOURCE_DIR, golden_model

np = pytest.importorskip("numpy", reason="python3-numpy (scripts/setup installs it)")
PIL = pytest.importorskip("PIL.Image", reason="python3-pil (scripts/setup installs it)")
av = pytest.importorskip("av", reason="python3-av (scripts/setup installs it)")

# The fixture's <|video|>, <|image|>, <|image> and <image|>.
VIDEO, IMAGE, BOI, EOI = 508, 507, 505, 506
PROMPT = [2, 178, 199, VIDEO, 214, 410, 106]
GREEDY = SamplingParams(temperature=0, ignore_eos=True, max_tokens=6, logprobs=0)
CLIP_FRAMES, CLIP_FPS = 5, 2  # the test clip: 2.5 s of 16x16 noise
DEMO_TOKENIZER = str(SOURCE_DIR / "models" / "gemma4-demo")
ENGINE = dict(SMALL_ENGINE, max_model_len=1024, tokenizer=DEMO_TOKENIZER)


@pytest.fixture(scope="module")
def vision() -> LLM:
    return LLM(golden_model("vision"), **ENGINE)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An H.264 MP4 of CLIP_FRAMES noise frames at CLIP_FPS, written by PyAV."""
    path = tmp_path_factory.mktemp("video") / "noise.mp4"
    rng = np.random.default_rng(7)
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=CLIP_FPS)
        stream.width, stream.height, stream.pix_fmt = 16, 16, "yuv420p"
        for _ in range(CLIP_FRAMES):
            frame = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return path


def pyav_frames(path: Path) -> Any:
    """Every frame as vLLM's OpenCV loader gets it: bgr24 with swscale's bicubic, then RGB."""
    with av.open(str(path)) as container:
        return np.stack([f.reformat(format="bgr24", interpolation="BICUBIC").to_ndarray()[
            :, :, ::-1] for f in container.decode(video=0)])


def noise_frames(count: int, height: int = 12, width: int = 20) -> Any:
    return np.random.default_rng(count).integers(0, 256, (count, height, width, 3), np.uint8)


Run = Tuple[List[int], List[int], List[List[Tuple[int, float]]]]


def run(llm: LLM, prompts: List[Any]) -> List[Run]:
    """(prompt_token_ids, token_ids, logprobs) of each prompt."""
    return [(o.prompt_token_ids, o.outputs[0].token_ids,
             [sorted((t, lp.logprob) for t, lp in step.items()) for step in o.outputs[0].logprobs])
            for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


def with_video(video: Any, **extra: Any) -> dict:
    return {"prompt_token_ids": PROMPT, "multi_modal_data": {"video": video}, **extra}


def frames_in(prompt_token_ids: List[int]) -> int:
    return prompt_token_ids.count(BOI)


def expanded(llm: LLM, stamps: List[str], frame: List[int]) -> List[int]:
    """PROMPT with its <|video|> laid out as Gemma4Processor does: "mm:ss", then `frame`."""
    tok = llm.get_tokenizer()
    ids = PROMPT[:3]
    for n, stamp in enumerate(stamps):
        ids += tok.encode(f" {stamp} " if n else f"{stamp} ", add_special_tokens=False) + frame
    return ids + PROMPT[4:]


def test_every_form_gives_the_frames_as_images_in_the_expanded_layout(vision: LLM) -> None:
    frames = noise_frames(3)
    forms = [frames, (frames, {"fps": 24, "frames_indices": [0, 1, 2]}), (frames, {}),
             [PIL.fromarray(f) for f in frames], list(frames), [frames],
             [PIL.fromarray(f).convert("RGBA") for f in frames]]  # convert("RGB") as images
    runs = run(vision, [with_video(f) for f in forms])
    # The same frames as images at the video budget, each a bare <|image|> where the frame was.
    images = run(vision, [{"prompt_token_ids": expanded(vision, ["00:00"] * 3, [IMAGE]),
                           "multi_modal_data": {"image": [PIL.fromarray(f) for f in frames]},
                           "mm_processor_kwargs": {"max_soft_tokens": 70}}])[0]
    for form, result in zip(forms, runs):
        assert result == runs[0], type(form).__name__
    prompt_ids, token_ids, logprobs = runs[0]
    # 1/24 s apart: every stamp is 00:00; a 20x12 frame at 70 soft tokens is 60 of them.
    assert prompt_ids == expanded(vision, ["00:00"] * 3, [BOI] + [VIDEO] * 60 + [EOI])
    assert [IMAGE if t == VIDEO else t for t in prompt_ids] == images[0]
    assert (token_ids, logprobs) == images[1:]


def test_several_videos_go_one_per_video_token_in_order(vision: LLM) -> None:
    first, second = noise_frames(3), noise_frames(2)
    two = [2, VIDEO, 5, VIDEO]
    forms = [[first, second], [(first, {}), [PIL.fromarray(f) for f in second]],
             np.stack([first, first]), [first, first], [second, first]]  # 5-D: one per entry
    runs = run(vision, [{"prompt_token_ids": two, "multi_modal_data": {"video": f}}
                        for f in forms])
    assert runs[0] == runs[1]
    assert runs[2] == runs[3]
    assert [frames_in(r[0]) for r in runs] == [5, 5, 6, 6, 5]
    assert runs[4][0] != runs[0][0]  # swapped, the 5 between them moves: order holds


def test_metadata_sets_the_frames_times(vision: LLM) -> None:
    frames = noise_frames(3)
    cases = [  # metadata, the frames' "mm:ss" (frames_indices[i] / fps)
        ({"fps": 0.25, "frames_indices": [0, 31, 62], "total_num_frames": 63, "duration": 252.0,
          "video_backend": "opencv", "do_sample_frames": False}, ["00:00", "02:04", "04:08"]),
        ({"frames_indices": np.array([0, 24, 48])}, ["00:00", "00:01", "00:02"]),  # 24 fps
        ({"fps": 0.5}, ["00:00", "00:02", "00:04"]),  # frames 0, 1, 2
    ]
    runs = run(vision, [with_video((frames, metadata)) for metadata, _ in cases])
    frame = [BOI] + [VIDEO] * 60 + [EOI]
    for (metadata, stamps), (prompt_ids, _, _) in zip(cases, runs):
        assert prompt_ids == expanded(vision, stamps, frame), metadata


def test_a_clip_by_path_and_bytes_gives_the_frames_pyav_decodes(vision: LLM, clip: Path) -> None:
    decoded = pyav_frames(clip)
    assert decoded.shape == (CLIP_FRAMES, 16, 16, 3)
    every = {"fps": CLIP_FPS, "frames_indices": list(range(CLIP_FRAMES))}
    three = {"mm_processor_kwargs": {"num_frames": 3}}  # np.linspace(0, 4, 3): frames 0, 2, 4
    runs = run(vision, [
        with_video(str(clip)), with_video(clip), with_video(clip.read_bytes()),
        with_video((decoded, every)),
        with_video(clip, **three), with_video((decoded[::2], {"fps": CLIP_FPS,
                                                               "frames_indices": [0, 2, 4]})),
    ])
    assert runs[0] == runs[1] == runs[2] == runs[3]
    assert frames_in(runs[0][0]) == CLIP_FRAMES
    assert runs[4] == runs[5]
    assert frames_in(runs[4][0]) == 3


def test_media_io_kwargs_and_max_video_seconds(clip: Path) -> None:
    llm = LLM(golden_model("vision"), media_io_kwargs={"video": {"num_frames": 2}},
              max_video_seconds=2.5, **ENGINE)
    counts = [frames_in(r[0]) for r in run(llm, [
        with_video(clip), with_video(clip, mm_processor_kwargs={"num_frames": 4}),
        with_video(clip, mm_processor_kwargs={"num_frames": -1, "fps": 1}),  # floor(2.5 s x 1)
        with_video(noise_frames(3))])]  # decoded frames are taken as given
    assert counts == [2, 4, 2, 3]
    # The engine's mm_processor_kwargs come after its media_io_kwargs, as the server's flags.
    both = LLM(golden_model("vision"), media_io_kwargs={"video": {"num_frames": 2}},
               mm_processor_kwargs={"num_frames": 3}, **ENGINE)
    assert frames_in(run(both, [with_video(clip)])[0][0]) == 3
    short = LLM(golden_model("vision"), max_video_seconds=2, **ENGINE)
    with pytest.raises(ValueError) as e:
        short.generate(with_video(clip), GREEDY, use_tqdm=False)
    assert str(e.value) == "prompt 0: video 0: The video is 2.5 s long; the limit is 2 s"
    assert short.num_unfinished_requests() == 0


def test_bad_engine_arguments() -> None:
    cases = [
        (dict(media_io_kwargs={"video": {"num_frames": 0}}), ValueError,
         "media_io_kwargs.video: num_frames must be -1 (every frame) or an integer from 1 to "
         "100000, got 0"),
        (dict(media_io_kwargs={"video": {"backend": "pyav"}}), ValueError,
         "media_io_kwargs.video: unsupported key 'backend' (num_frames, fps, video_backend, "
         "frame_recovery)"),
        (dict(media_io_kwargs={"subtitles": {}}), ValueError,
         "media_io_kwargs: unknown modality 'subtitles' (image, video or audio)"),
        (dict(mm_processor_kwargs={"fps": "fast"}), ValueError,
         "mm_processor_kwargs: fps must be -1 (the clip's own) or a number of frames per second "
         "above 0 and at most 1000, got \"fast\""),
        (dict(max_video_seconds=0), ValueError,
         "--max-video-seconds must be a positive number of seconds, got 0.0"),
        (dict(max_video_seconds="long"), TypeError,
         "LLM(max_video_seconds=...) has the wrong type: 'long'"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error) as e:
            LLM(golden_model("vision"), **kwargs, **ENGINE)
        assert str(e.value) == message


def test_video_errors(vision: LLM, clip: Path) -> None:
    frames = noise_frames(3)
    size = clip.stat().st_size
    missing = clip.parent / "missing.mp4"
    cases = [
        (frames.astype(np.float32), TypeError,
         "prompt 0: video 0: frames must be uint8 RGB (0-255), got dtype float32"),
        (frames[..., 0], ValueError,
         "prompt 0: video 0: frames must be a (frames, height, width, 3) RGB array, got shape "
         "(3, 12, 20)"),
        (frames[:0], ValueError, "prompt 0: video 0 has no frames"),
        ([], ValueError,
         "prompt 0: Found 1 <|video|> token in the prompt but 0 videos were given; the prompt "
         "needs one <|video|> per video, in order"),
        ([frames, frames], ValueError,
         "prompt 0: Found 1 <|video|> token in the prompt but 2 videos were given; the prompt "
         "needs one <|video|> per video, in order"),
        ([frames[0], noise_frames(1, 16, 16)[0]], ValueError,
         "prompt 0: video 0: frame 1 is 16x16 but frame 0 is 20x12; a video's frames share one "
         "size"),
        ([PIL.fromarray(frames[0]), "frame.png"], TypeError,
         "prompt 0: video 0: frame 1 must be a PIL image or a (height, width, 3) uint8 array, "
         "got str"),
        ((frames, {"fps": 2, "frames_indices": [0, 1]}), ValueError,
         "prompt 0: video 0: metadata has 2 frames_indices for 3 frames; give one per frame"),
        ((frames, {"fps": 0}), ValueError,
         "prompt 0: video 0: metadata fps must be a positive number of frames per second, got 0"),
        ((frames, {"frames_indices": [0, -1, 2]}), ValueError,
         "prompt 0: video 0: metadata frames_indices must be non-negative whole numbers, got -1"),
        ((frames, {"fps": 2, "timestamps": [0, 1, 2]}), ValueError,
         "prompt 0: video 0: unknown metadata key(s) timestamps (vLLM's video metadata: fps, "
         "frames_indices, total_num_frames, duration, width, height, video_backend, "
         "do_sample_frames)"),
        ((frames, {"do_sample_frames": True}), ValueError,
         "prompt 0: video 0: metadata do_sample_frames true is not supported; the frames are "
         "taken as given (pass bytes or a path to sample a clip)"),
        ((frames, [0, 1, 2]), TypeError,
         "prompt 0: video 0: the metadata of a (frames, metadata) tuple must be a dict (vLLM's "
         "fps, frames_indices, ...), got list"),
        (42, TypeError,
         "prompt 0: multi_modal_data['video'] takes a video or a list of them (a (frames, "
         "height, width, 3) uint8 array, a list of frames (PIL images or (height, width, 3) "
         "uint8 arrays), a (frames, metadata) tuple, encoded clip bytes or a file path), got int"),
        (b"not a video", ValueError,
         "prompt 0: video 0: The file is not a video this server can read (expected MP4, MOV, "
         "WebM, MKV, AVI, GIF or WebP)"),
        (clip.read_bytes()[:-200], ValueError,  # PyAV writes the index (moov) last
         f"prompt 0: video 0: The video is truncated or corrupt: its 'moov' box ends at byte "
         f"{size} but the file has {size - 200} bytes"),
        (missing, FileNotFoundError,
         f"[Errno 2] prompt 0: video 0: No such file or directory: '{missing}'"),
    ]
    for video, error, message in cases:
        with pytest.raises(error) as e:
            vision.generate(with_video(video), GREEDY, use_tqdm=False)
        assert str(e.value) == message
    with pytest.raises(ValueError) as e:  # the second prompt's second video
        vision.generate([with_video(frames), {"prompt_token_ids": [2, VIDEO, 5, VIDEO],
                                              "multi_modal_data": {"video": [frames, b"RIFF"]}}],
                        GREEDY, use_tqdm=False)
    assert str(e.value) == ("prompt 1: video 1: The file is not a video this server can read "
                            "(expected MP4, MOV, WebM, MKV, AVI, GIF or WebP)")
    with pytest.raises(ValueError) as e:
        vision.generate(with_video(clip, mm_processor_kwargs={"num_frames": 0}), GREEDY,
                        use_tqdm=False)
    assert str(e.value) == ("prompt 0: mm_processor_kwargs: num_frames must be -1 (every frame) "
                            "or an integer from 1 to 100000, got 0")
    with pytest.raises(ValueError) as e:
        vision.generate({"prompt_token_ids": PROMPT, "multi_modal_data": {"video": [],
                                                                          "subtitles": "x"}},
                        GREEDY, use_tqdm=False)
    assert str(e.value) == ("prompt 0: multi_modal_data takes {'image': ..., 'audio': ..., "
                            "'video': ...} only (Gemma 4's modalities), got {'video': [], "
                            "'subtitles': 'x'}")
    assert vision.num_unfinished_requests() == 0


def test_a_model_without_a_tokenizer_or_vision_refuses_videos() -> None:
    bare = LLM(golden_model("vision"), **SMALL_ENGINE)
    with pytest.raises(ValueError) as e:
        bare.generate(with_video(noise_frames(1)), GREEDY, use_tqdm=False)
    assert str(e.value) == ("prompt 0: video input needs a tokenizer for its frames' timestamps, "
                            f"and {golden_model('vision')} has none (pass --tokenizer)")
    text_only = LLM(golden_model("dense"), **SMALL_ENGINE)
    with pytest.raises(ValueError) as e:
        text_only.generate({"prompt_token_ids": [2, 5], "multi_modal_data": {
            "video": noise_frames(1)}}, GREEDY, use_tqdm=False)
    assert str(e.value) == (f"prompt 0: This model does not accept video input: "
                            f"{golden_model('dense')} has no vision encoder.")


def test_chat_video_url_is_the_clip_given_to_generate(chat_model: str, clip: Path) -> None:
    llm = LLM(chat_model, media_io_kwargs={"video": {"num_frames": 3}},
              **dict(SMALL_ENGINE, max_model_len=1024))
    url = "data:video/mp4;base64," + base64.b64encode(clip.read_bytes()).decode()
    messages = [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": url}},
        {"type": "text", "text": "What happens?"}]}]
    chat = llm.chat(messages, GREEDY, use_tqdm=False)[0]
    prompt = llm.get_tokenizer().apply_chat_template(messages, tokenize=False,
                                                     add_generation_prompt=True)
    assert chat.prompt == prompt
    assert prompt.count("<|video|>") == 1
    generated = llm.generate({"prompt": prompt, "multi_modal_data": {"video": clip}}, GREEDY,
                             use_tqdm=False)[0]
    assert chat.prompt_token_ids == generated.prompt_token_ids
    assert chat.outputs[0].token_ids == generated.outputs[0].token_ids
    assert chat.outputs[0].cumulative_logprob == generated.outputs[0].cumulative_logprob
    boi = llm.get_tokenizer().convert_tokens_to_ids("<|image>")
    assert chat.prompt_token_ids.count(boi) == 3
    assert llm.num_unfinished_requests() == 0
