"""Real engines for the graph tests: the tiny Qwen3-VL pair, started once per session."""

from pathlib import Path

import pytest
from PIL import Image, ImageDraw

ENGINES = ("vllm", "transformers")


@pytest.fixture(scope="session")
def scene(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scene") / "scene.png"
    img = Image.new("RGB", (320, 256), (128, 128, 128))
    draw = ImageDraw.Draw(img)
    draw.rectangle((110, 78, 210, 178), fill=(220, 30, 30))
    draw.ellipse((20, 20, 60, 60), fill=(30, 60, 220))
    img.save(path)
    return path


@pytest.fixture(scope="session", params=ENGINES)
def engines(request, tiny_pair):
    """(kind, small, large), each pair started once per session and shut down at the end."""
    small_dir, large_dir = (str(p) for p in tiny_pair)
    if request.param == "vllm":
        pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
        from mai_graph.backends.vllm import VLLMBackend
        from mai_graph.loop import run_sync

        small = VLLMBackend(small_dir, name="tiny-small")
        large = VLLMBackend(large_dir, name="tiny-large")
        run_sync(small.start())
        run_sync(large.start())
    else:
        import torch

        torch.set_num_threads(1)
        from mai_graph.backends.transformers import TransformersBackend

        small = TransformersBackend(small_dir, name="tiny-small")
        large = TransformersBackend(large_dir, name="tiny-large")
    yield request.param, small, large
    for backend in (small, large):
        if hasattr(backend, "shutdown"):
            backend.shutdown()
