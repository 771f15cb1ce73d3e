"""Real engines for the graph tests: the tiny Qwen3-VL pair, started once per session."""

from pathlib import Path

import pytest

ENGINES = ("vllm", "transformers")
HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    """The engine tier's coroutine tests share one session event loop (the unit tier gets one
    loop per test): the engines above are started once and shared by the tests here."""
    session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        marker = item.get_closest_marker("asyncio")
        if item.path.is_relative_to(HERE) and marker and "loop_scope" not in marker.kwargs:
            item.add_marker(session_loop, append=False)


@pytest.fixture(scope="session")
def scene(tmp_path_factory) -> Path:
    from mai_graph.tiny.build import draw_scene

    return draw_scene(tmp_path_factory.mktemp("scene") / "scene.png")


@pytest.fixture(scope="session", params=ENGINES)
def engines(request, tiny_pair):
    """(kind, small, large), each pair started once per session and shut down at the end."""
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.loop import run_sync
    from mai_graph.tiny.build import tiny_backends

    if request.param == "vllm":
        pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    else:
        import torch

        torch.set_num_threads(1)
    small, large = tiny_backends(request.param, tiny_pair[0].parent)
    run_sync(start_backends(small, large))
    yield request.param, small, large
    shutdown_backends(small, large)


def pytest_sessionfinish(session, exitstatus):
    """No engine process this test session started may outlive it (clean shutdown)."""
    try:
        import psutil
    except ImportError:
        return
    import time

    def engine_children():
        found = []
        for child in psutil.Process().children(recursive=True):
            try:
                if child.name().startswith("VLLM::") and child.status() != psutil.STATUS_ZOMBIE:
                    found.append(child)
            except psutil.Error:
                pass
        return found

    deadline = time.monotonic() + 30
    while (left := engine_children()) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        names = ", ".join(f"{p.name()} (pid {p.pid})" for p in left)
        print(f"\nengine processes outlived the test session: {names}")
        session.exitstatus = 1
