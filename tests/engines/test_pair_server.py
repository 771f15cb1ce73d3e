"""The trained pair over `vllm serve`: the large model served, the small one in-process.

Over the server the transfer prompt and the re-sent reasoning travel as text (the server
tokenizes them again); the large model was trained on such prompts too.
"""

import os
import sys

import pytest

from mai_graph import MAIContext, arun
from mai_graph.eval.scorers import score
from mai_graph.pair import PAIR_DIR, read_manifest, trained_pair_paths
from mai_graph.pair.task import heldout_items
from tests.servers import free_port, serving

pytestmark = [pytest.mark.engine, pytest.mark.server]

N = 10


@pytest.fixture(scope="module")
def large_url(tmp_path_factory):
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    pytest.importorskip("openai", reason="installed with the openai extra")
    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(trained_pair_paths(PAIR_DIR)[1]), "--served-model-name", "trained-large",
           "--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
           "--gpu-memory-utilization", "0.05", "--block-size", "32", "--max-model-len", "4096",
           "--enable-prompt-tokens-details",
           "--enable-per-request-metrics"]  # fmt: skip
    log = tmp_path_factory.mktemp("vllm-serve") / "server.log"
    with serving(cmd, f"http://127.0.0.1:{port}/health", log, env=env):
        yield f"http://127.0.0.1:{port}/v1"


async def test_mai_with_the_large_model_served(large_url, tmp_path):
    from mai_graph.backends.lifecycle import shutdown_backends
    from mai_graph.backends.openai import OpenAIBackend
    from mai_graph.backends.vllm import VLLMBackend

    small = VLLMBackend(str(trained_pair_paths(PAIR_DIR)[0]), name="trained-small")
    large = OpenAIBackend.from_url(large_url, "trained-large")
    right = {"large": 0, "mai": 0}
    routes = set()
    try:
        for i, item in enumerate(heldout_items(N, seed=read_manifest(PAIR_DIR)["heldout"]["seed"])):
            path = tmp_path / f"{i}.png"
            item.image.save(path)
            row = item.row
            ctx = MAIContext(answer_kind=row["kind"])
            for policy in right:
                result = await arun(
                    row["question"], str(path), options=row.get("options"), small=small,
                    large=large, context=ctx, policy=policy,
                )  # fmt: skip
                verdict = score(result.answer, row["answer"], row["kind"], row.get("options"))
                right[policy] += verdict.correct
                if policy == "mai":
                    routes.add(result.route)
    finally:
        shutdown_backends(small, large)
    assert right["large"] >= 0.7 * N, right
    assert right["mai"] >= 0.7 * N, (right, routes)
