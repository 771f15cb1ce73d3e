"""`mai-graph run` on real backends, as a user runs it (a subprocess)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("backend", ["transformers", "vllm"])
def test_run_on_real_backend(backend, tiny_pair, scene):
    if backend == "vllm":
        pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    small, large = (str(p) for p in tiny_pair)
    out = subprocess.run(
        [sys.executable, "-m", "mai_graph.cli", "run", "Which colour is the square?",
         "--image", str(scene), "--option", "red", "--option", "blue", "--backend", backend,
         "--small", small, "--large", large, "--cot-max-tokens", "32", "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["route"] in ("agree", "extract_agree", "transfer")
    assert result["canonical"] in ("A", "B")
    assert result["metrics"][0]["prompt_tokens"] > 100
