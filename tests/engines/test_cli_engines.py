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


def test_run_with_drafters_and_a_chain_on_transformers(tiny_pair, scene, tmp_path):
    # Each added model is the same checkpoint under another path (so another backend name).
    small, large = tiny_pair
    (tmp_path / "drafter").symlink_to(small, target_is_directory=True)
    (tmp_path / "larger").symlink_to(large, target_is_directory=True)
    out = subprocess.run(
        [sys.executable, "-m", "mai_graph.cli", "run", "Which colour is the square?",
         "--image", str(scene), "--option", "red", "--option", "blue", "--backend",
         "transformers", "--small", str(small), "--drafter", str(tmp_path / "drafter"),
         "--large", str(large), "--larger", str(tmp_path / "larger"), "--cot-max-tokens", "16",
         "--set", "gate=never", "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["stage"] == 2  # gate never: both stages escalate
    models = {m["model"] for m in result["metrics"]}
    assert models == {str(small), str(tmp_path / "drafter"), str(large), str(tmp_path / "larger")}
    assert {m.get("drafter") for m in result["metrics"] if m["node"] == "verify"} >= {0, 1}


@pytest.mark.server
def test_serve_with_a_drafter_and_a_larger_model_on_transformers(tiny_pair, scene, tmp_path):
    """`mai-graph serve --drafter M --larger M` on real tiny models, asked by the openai client.

    The defect it guards: serve formatted ``small.name`` of the drafters' list and crashed at
    start-up. Here the server starts, names every model, and answers through both stages.
    """
    import base64

    from openai import OpenAI

    from tests.servers import free_port, serving

    small, large = tiny_pair
    (tmp_path / "drafter").symlink_to(small, target_is_directory=True)
    (tmp_path / "larger").symlink_to(large, target_is_directory=True)
    port = free_port()
    cmd = [sys.executable, "-m", "mai_graph.cli", "serve", "--port", str(port), "--backend",
           "transformers", "--small", str(small), "--drafter", str(tmp_path / "drafter"),
           "--large", str(large), "--larger", str(tmp_path / "larger"),
           "--allow-setting", "gate", "--allow-setting", "cot_max_tokens"]  # fmt: skip
    log = tmp_path / "serve.log"
    with serving(cmd, f"http://127.0.0.1:{port}/health", log, timeout=600):
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        image = base64.b64encode(scene.read_bytes()).decode()
        reply = client.chat.completions.create(
            model="mai",
            messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
                {"type": "text", "text": "Which colour is the square?"},
            ]}],
            extra_body={"mai": {"options": ["red", "blue"], "gate": "never",
                                "cot_max_tokens": 16}},
        )  # fmt: skip
    started = log.read_text()
    assert f"{small}, {tmp_path / 'drafter'} + {large}, {tmp_path / 'larger'}" in started
    mai = reply.model_extra["mai"]
    assert mai["stage"] == 2  # gate never: both stages escalate
    served = {m["model"] for m in mai["metrics"]}
    assert {"mai/drafter-1", "mai/drafter-2"} <= served and any("stage-2" in m for m in served)
    assert str(small) not in " ".join(served)  # clients never see checkpoint paths
