"""Stopping an engine's processes, without vLLM: a stand-in engine whose "core" is a real
process that, like an idle vLLM core whose SIGTERM went to a side thread, only exits once a
message reaches it."""

import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from mai_graph.backends.vllm import teardown as vllm_teardown
from mai_graph.backends.vllm.teardown import processes_of, reap, stop_engine
from mai_graph.loop import BackgroundLoop


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


class _Engine:
    """An AsyncLLM stand-in: ``shutdown`` waits for the core; the core exits on a message."""

    def __init__(self, core: subprocess.Popen, exit_on_nudge: int | None) -> None:
        self.core = core
        self.nudges: list[float] = []
        self.exit_on_nudge = exit_on_nudge
        manager = SimpleNamespace(processes=[SimpleNamespace(pid=core.pid)])
        self.engine_core = SimpleNamespace(
            resources=SimpleNamespace(engine_manager=manager, ctx=None),
            abort_requests_async=self._abort,
        )
        self.output_handler = None

    async def _abort(self, request_ids: list[str]) -> None:
        self.nudges.append(time.monotonic())
        if len(self.nudges) == self.exit_on_nudge:
            self.core.terminate()

    def shutdown(self, timeout: float) -> None:
        try:
            self.core.wait(timeout)
        except subprocess.TimeoutExpired:
            pass  # vLLM would kill it now; the reaper below does it here


@pytest.fixture
def loop():
    background = BackgroundLoop("test-teardown")
    yield background
    background.close()


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setattr(vllm_teardown, "WAKE_INTERVAL_S", 0.1)
    monkeypatch.setattr(vllm_teardown, "ENGINE_EXIT_GRACE_S", 3.0)
    monkeypatch.setattr(vllm_teardown, "REAP_GRACE_S", 1.0)


def test_the_core_is_nudged_until_it_exits_and_no_longer(loop):
    core = _sleeper()
    engine = _Engine(core, exit_on_nudge=3)
    start = time.monotonic()
    stop_engine(engine, loop, processes_of([core.pid]), "a test engine")
    took = time.monotonic() - start
    assert core.poll() is not None and took < 2.0, took
    assert len(engine.nudges) == 3
    time.sleep(0.5)
    assert len(engine.nudges) == 3, "nudged after the core exited"


@pytest.mark.slow
def test_a_core_that_never_exits_is_killed_after_the_grace(loop, caplog):
    core = _sleeper()
    engine = _Engine(core, exit_on_nudge=None)
    start = time.monotonic()
    stop_engine(engine, loop, processes_of([core.pid]), "a test engine")
    took = time.monotonic() - start
    assert core.wait(5) is not None and 3.0 <= took < 6.0, took
    assert f"killing process {core.pid} left behind by a test engine" in caplog.text
    assert len(engine.nudges) >= 10  # nudged all along the grace


def test_a_failed_shutdown_still_reaps_the_processes(loop):
    core = _sleeper()
    engine = _Engine(core, exit_on_nudge=None)

    def broken(timeout: float) -> None:
        raise RuntimeError("the engine manager broke")

    engine.shutdown = broken
    with pytest.raises(RuntimeError, match="broke"):
        stop_engine(engine, loop, processes_of([core.pid]), "a test engine")
    assert core.wait(5) is not None


def test_processes_not_yet_signalled_get_sigterm_before_they_are_killed(loop, monkeypatch, caplog):
    """A stop that fails before vLLM signalled the engine: SIGTERM first, so the processes
    can still exit by themselves (here at once: a sleeping Python process dies of SIGTERM)."""
    monkeypatch.setattr(vllm_teardown, "REAP_GRACE_S", 5.0)
    core = _sleeper()
    engine = _Engine(core, exit_on_nudge=None)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="the output handler"):
        stop_engine(_Unstoppable(engine), loop, processes_of([core.pid]), "a test engine")
    assert not psutil.pid_exists(core.pid) or psutil.Process(core.pid).status() == "zombie"
    assert time.monotonic() - start < 4.0 and "killing process" not in caplog.text


class _Unstoppable:
    """An engine whose output handler cannot even be reached."""

    def __init__(self, engine: _Engine) -> None:
        self.engine_core = engine.engine_core

    @property
    def output_handler(self):
        raise RuntimeError("the output handler is gone")


def test_a_pid_taken_by_a_later_process_is_left_alone():
    newcomer = _sleeper()
    try:
        handle = psutil.Process(newcomer.pid)
        if not hasattr(handle, "_ident"):
            pytest.skip("this psutil keeps process identity elsewhere")
        # the handle as if taken of an earlier process that had this pid
        handle._ident = (handle.pid, handle.create_time() - 100)
        done = threading.Event()
        threading.Thread(target=lambda: (reap([handle], 0.2, "x"), done.set())).start()
        assert done.wait(5)
        assert newcomer.poll() is None and psutil.pid_exists(newcomer.pid)
    finally:
        newcomer.kill()
        newcomer.wait()
