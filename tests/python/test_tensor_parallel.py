"""LLM(tensor_parallel_size=N) under `mpirun -n N`: every rank but 0 serves the model inside the
constructor, rank 0 answers as one process does, and a size the checkpoint cannot split is
reported once, by rank 0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import golden_model

SCRIPT = """
import sys
from gemmaserve import LLM, SamplingParams
llm = LLM(sys.argv[1], tensor_parallel_size=int(sys.argv[2]), max_model_len=128,
          kv_cache_memory_bytes=8 << 20, threads=1)
out = llm.generate([[2, 10, 20, 30]],
                   SamplingParams(temperature=0, max_tokens=5, ignore_eos=True), use_tqdm=False)
print("TOKENS", out[0].outputs[0].token_ids, flush=True)
"""


def run(ranks: int, tp: int) -> subprocess.CompletedProcess:
    if shutil.which("mpirun") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("mpirun is not installed (required under CI)")
        pytest.skip("mpirun is not installed (run scripts/setup)")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    command = [sys.executable, "-c", SCRIPT, golden_model("dense"), str(tp)]
    if ranks > 1:
        command = ["mpirun", "-n", str(ranks), "--bind-to", "none", "--oversubscribe"] + command
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_tensor_parallel_llm_under_mpirun_answers_as_one_process() -> None:
    one = run(1, 1)
    two = run(2, 2)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    tokens = [line for line in one.stdout.splitlines() if line.startswith("TOKENS")]
    assert len(tokens) == 1
    assert [line for line in two.stdout.splitlines() if line.startswith("TOKENS")] == tokens
    assert "tensor parallel rank 1 of 2" in two.stderr


def test_a_size_that_does_not_split_the_heads_is_reported_once() -> None:
    bad = run(3, 3)
    assert bad.returncode != 0
    message = "ValueError: --tensor-parallel-size 3 does not divide num_attention_heads (4)"
    assert bad.stderr.count(message) == 1, bad.stderr
