"""Shared fixtures: the built binary, the golden tiny checkpoints, and tiny random-weight Gemma 4
models with the real vocabulary and chat template (from ../shared) for text, chat and audio."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("GEMMASERVE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BINARY = Path(os.environ.get("GEMMASERVE_BINARY", SOURCE_DIR / "build" / "gemmaserve"))


def shared_dir() -> Path:
    return Path(os.environ.get("GEMMASERVE_SHARED", SOURCE_DIR.parent / "shared"))


def require_shared(relative: str) -> Path:
    """A file under shared/: skipped with a message outside CI when missing, failed under CI."""
    path = shared_dir() / relative
    if not path.exists():
        message = f"shared data missing: {path}"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (required under CI)")
        pytest.skip(message)
    return path


def golden_model(name: str) -> str:
    return str(SOURCE_DIR / "tests" / "data" / "golden" / "models" / name)


# Small engines: a short context keeps the KV cache a few MiB; two threads as the C++ tests.
SMALL_ENGINE = dict(max_model_len=256, kv_cache_memory_bytes=16 << 20, threads=2)


def run_binary(*args: str) -> str:
    result = subprocess.run([str(BINARY), *args], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"gemmaserve {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def tiny_chat_model(factory: pytest.TempPathFactory, preset: str) -> str:
    """make-test-model --preset PRESET with tokenizer.json exported from the real Gemma 4
    vocabulary and the real 31B chat template: random weights, real text and chat handling."""
    vocab = require_shared("data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf")
    template = require_shared("data/chat-templates/google-gemma-4-31B-it.jinja")
    model = factory.mktemp("models") / preset
    run_binary("make-test-model", "--preset", preset, "--dtype", "bf16", "--seed", "0", "--out",
               str(model))
    run_binary("export-tokenizer", "--from", str(vocab), "--out", str(model / "tokenizer.json"))
    shutil.copy(template, model / "chat_template.jinja")
    return str(model)


@pytest.fixture(scope="session")
def chat_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny preset (a vision tower, no audio) as tiny_chat_model makes it."""
    return tiny_chat_model(tmp_path_factory, "tiny")


@pytest.fixture(scope="session")
def unified_chat_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny-unified preset (the 12B's encoder-free image and audio embedders) likewise."""
    return tiny_chat_model(tmp_path_factory, "tiny-unified")


def python_env() -> dict:
    """The environment for a child interpreter: this one's package path first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env
