"""`python3 -m gemmaserve serve` and `-m gemmaserve.entrypoints.openai.api_server` start the same
server as the binary; the package imports from any folder; stubs and docstrings stay true."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import gemmaserve
from gemmaserve import _gemmaserve

from conftest import golden_model, run_binary

ENGINE_FLAGS = ["--max-model-len", "256", "--kv-cache-memory-bytes", str(16 << 20),
                "--threads", "2"]


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(gemmaserve.__file__).resolve().parents[1])
    return env


def start(args: list) -> tuple:
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=child_env())
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
    proc.kill()
    pytest.fail("server did not start:\n" + "".join(lines))


def post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@pytest.mark.parametrize("entry", [
    ["-m", "gemmaserve", "serve", golden_model("dense")],
    ["-m", "gemmaserve.entrypoints.openai.api_server", "--model", golden_model("dense")],
])
def test_module_entry_points_serve_like_the_binary(entry: list) -> None:
    proc, port = start([*entry, "--served-model-name", "gemma4", "--host", "127.0.0.1",
                        "--port", "0", *ENGINE_FLAGS])
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as r:
            assert json.loads(r.read())["data"][0]["id"] == "gemma4"
        body = {"model": "gemma4", "prompt": [2, 175, 50, 120], "max_tokens": 5,
                "temperature": 0, "ignore_eos": True}
        reply = post(port, "/v1/completions", body)
        assert reply["usage"]["completion_tokens"] == 5
        # Same tokens as the offline API and the binary.
        cli = json.loads(run_binary("generate", golden_model("dense"), "--prompt-ids",
                                    "2,175,50,120", "--max-tokens", "5", "--temperature", "0",
                                    "--ignore-eos", "--json", *ENGINE_FLAGS))
        logprobs = post(port, "/v1/completions", {**body, "logprobs": 1})
        assert len(logprobs["choices"][0]["logprobs"]["tokens"]) == len(cli["token_ids"])
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl+C stops it as it stops the binary
        assert proc.wait(timeout=60) == 0


def test_serve_errors_read_like_the_binary() -> None:
    args = ["serve", golden_model("dense"), "--port", "70000"]
    py = subprocess.run([sys.executable, "-m", "gemmaserve", *args], capture_output=True,
                        text=True, env=child_env(), check=False)
    binary = subprocess.run([os.environ.get("GEMMASERVE_BINARY", "gemmaserve"), *args],
                            capture_output=True, text=True, check=False)
    assert py.returncode == binary.returncode == 2
    assert "error: --port must be in [0, 65535]" in py.stderr
    assert py.stderr.strip().splitlines()[-1] == binary.stderr.strip().splitlines()[-1]
    usage = subprocess.run([sys.executable, "-m", "gemmaserve", "generate"],
                           capture_output=True, text=True, env=child_env(), check=False)
    assert usage.returncode == 2 and "unknown command 'generate'" in usage.stderr


def test_importable_from_any_folder_through_the_user_site() -> None:
    site = subprocess.run([sys.executable, "-m", "site", "--user-site"], capture_output=True,
                          text=True, check=True).stdout.strip()
    pth = Path(site) / "gemmaserve-build.pth"
    if not pth.exists():
        pytest.skip(f"{pth} not written (configured with -DGEMMASERVE_PYTHON_USER_SITE=OFF)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", "import gemmaserve; print(gemmaserve.LLM)"],
                         capture_output=True, text=True, cwd="/", env=env, check=False)
    assert run.returncode == 0, run.stderr
    assert "gemmaserve.llm.LLM" in run.stdout


def test_stubs_name_everything_the_extension_has() -> None:
    stub = Path(gemmaserve.__file__).with_name("_gemmaserve.pyi")
    tree = ast.parse(stub.read_text())
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    top |= {t.target.id for t in tree.body if isinstance(t, ast.AnnAssign)}
    public = {n for n in dir(_gemmaserve) if not n.startswith("_")} | {"__version__"}
    assert top - {"LogprobEntries"} == public
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        methods = {f.name for f in cls.body if isinstance(f, ast.FunctionDef)} - {"__init__"}
        actual = {m for m in dir(getattr(_gemmaserve, cls.name)) if not m.startswith("_")}
        assert methods == actual, cls.name
    assert (stub.parent / "py.typed").exists()


def test_every_public_object_has_a_docstring() -> None:
    for name in gemmaserve.__all__:
        obj = getattr(gemmaserve, name)
        if inspect.isclass(obj):
            assert obj.__doc__ and obj.__doc__.strip(), name
            for attr, member in vars(obj).items():
                if inspect.isfunction(member) and not attr.startswith("_"):
                    assert member.__doc__, f"{name}.{attr}"
    assert gemmaserve.LLM.generate.__doc__ and gemmaserve.LLM.chat.__doc__
