"""Faults on real engines: a killed engine core, a killed / slow / absent `vllm serve`,
bursts of cancelled runs, and clean shutdown.

Only processes these tests started are killed: the engine core of a backend built here (found
through the backend), and the process tree of a server started here.
"""

import asyncio
import os
import signal
import sys
import time

import pytest

from mai_graph import BackendError, MAIContext, arun
from mai_graph.backends.steered import SteeredBackend
from tests.servers import free_port, get, paused, serving, signal_side_thread

pytestmark = pytest.mark.engine

QUESTION = "Which colour is the large square in the centre of the image?"
OPTIONS = ["red", "blue", "green", "yellow"]
DISAGREE = ({"short": ["A"], "s2": ["C"]}, {"short": ["B"]})
AGREE = ({"short": ["A"]}, {"short": ["A"]})


def steered(small, large, choices):
    """``small=`` and ``large=`` arguments whose short answers are forced by ``choices``."""
    return {"small": SteeredBackend(small, choices[0]), "large": SteeredBackend(large, choices[1])}


def alive(pids):
    import psutil

    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


async def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


# -- the in-process engine dies ------------------------------------------------------------------


async def test_killed_engine_core_fails_the_run_then_restarts_then_fails_fast(tiny_pair, scene):
    """One engine of our own (the session's pair is not touched): kill its core mid-run."""
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    from mai_graph.backends.vllm import VLLMBackend

    backend = VLLMBackend(str(tiny_pair[0]), name="tiny-small", max_restarts=1)
    try:
        await backend.start(warmup=False)
        first = backend.engine_processes()
        assert len(first) >= 1
        long = MAIContext(cot_max_tokens=3000, cot_min_tokens=3000, short_max_tokens=4)
        run = asyncio.create_task(
            arun(QUESTION, str(scene), options=OPTIONS, context=long,
                 **steered(backend, backend, DISAGREE))
        )  # fmt: skip
        await wait_until(lambda: backend.running_requests() > 0 or run.done(), 60, "no request")
        # Paused first, then killed: the kill lands mid-run however hard the generating engine
        # holds this process back (see tests.servers.paused).
        with paused(first):
            assert not run.done(), f"the run ended before the kill: {run}"
            killed_at = time.monotonic()
            os.kill(first[0], signal.SIGKILL)  # the engine core process of this backend
        with pytest.raises(BackendError) as err:
            await run
        failed_after = time.monotonic() - killed_at
        message = str(err.value)
        assert "tiny-small: the vLLM engine of" in message and "died" in message
        assert "next request starts a new engine" in message
        assert err.value.parameter == "model" and not err.value.transient
        assert failed_after < 15, f"the run took {failed_after:.1f} s to fail"
        print(f"killed engine core: the run failed {failed_after:.2f} s later")
        # Nothing of the dead engine is left running (its worker exits or is reaped).
        await wait_until(lambda: not alive(first), 15, f"left behind: {alive(first)}")

        # The next run starts a new engine and answers.
        agree = steered(backend, backend, AGREE)
        start = time.monotonic()
        result = await arun(QUESTION, str(scene), options=OPTIONS, **agree)
        print(f"next run restarted the engine and answered in {time.monotonic() - start:.1f} s")
        assert result.route == "agree" and backend.restarts == 1
        second = backend.engine_processes()
        assert second and not set(second) & set(first)

        # A second death within the window exceeds max_restarts=1: fail fast, same message.
        os.kill(second[0], signal.SIGKILL)
        await wait_until(lambda: not alive(second[:1]), 10, "the core did not die")
        await asyncio.sleep(1.5)  # vLLM notices a dead core within about a second
        start = time.monotonic()
        for _ in range(2):
            with pytest.raises(BackendError, match="tiny-small: the vLLM engine of .* died") as err:
                await arun(QUESTION, str(scene), options=OPTIONS, **agree)
            assert "not started again" in str(err.value)
        assert time.monotonic() - start < 5
        print(f"two runs failed fast in {time.monotonic() - start:.3f} s")
        await wait_until(lambda: not alive(second), 15, f"left behind: {alive(second)}")
    finally:
        backend.shutdown()
    assert backend.engine_processes() == []


def test_max_restarts_is_validated():
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    from mai_graph import ConfigError
    from mai_graph.backends.vllm import VLLMBackend

    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="max_restarts must be an integer >= 0"):
            VLLMBackend("some/model", max_restarts=bad)


async def test_shutdown_lets_the_engine_exit_by_itself(tiny_pair):
    """The engine core and its worker exit on their own (exit code 0), not force-killed; a
    request still running fails with an error saying so instead of waiting forever."""
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    from mai_graph import GenerationRequest
    from mai_graph.backends.vllm import ENGINE_EXIT_GRACE_S, VLLMBackend

    backend = VLLMBackend(str(tiny_pair[0]), name="tiny-small")
    await backend.start(warmup=True)
    pids = backend.engine_processes()
    engine = backend.handle.engine
    cores = list(engine.engine_core.resources.engine_manager.processes)
    long = GenerationRequest(
        ({"role": "user", "content": [{"type": "text", "text": "Talk."}]},),
        max_tokens=3000, min_tokens=3000,
    )  # fmt: skip
    running = asyncio.create_task(backend.generate(long))
    await wait_until(lambda: backend.running_requests() > 0, 30, "the request never started")
    start = time.monotonic()
    await asyncio.to_thread(backend.shutdown)
    took = time.monotonic() - start
    with pytest.raises(BackendError, match="tiny-small: the engine was shut down during request"):
        await asyncio.wait_for(running, 5)
    assert [p.exitcode for p in cores] == [0], "the engine core was killed, not shut down"
    assert took < ENGINE_EXIT_GRACE_S
    print(f"shutdown of one engine: {took:.1f} s, engine core exit code 0")
    await wait_until(lambda: not alive(pids), 10, f"left behind: {alive(pids)}")
    assert engine.engine_core.resources.ctx.closed  # no unclosed ZMQ context warning later


async def test_a_callers_own_async_llm_through_the_translator_and_from_engine(tiny_pair, scene):
    """The translator serves an AsyncLLM the caller built and runs; from_engine wraps it and
    never restarts or stops it."""
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    from vllm import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from mai_graph import GenerationRequest
    from mai_graph.backends.vllm import Translator, VLLMBackend
    from mai_graph.inputs.sources import image_ref

    args = AsyncEngineArgs(model=str(tiny_pair[0]), max_model_len=4096, enforce_eager=True,
                           gpu_memory_utilization=0.05, block_size=32,
                           kv_cache_memory_bytes=1 << 30)  # fmt: skip
    engine = AsyncLLM.from_engine_args(args)
    try:
        translator = await asyncio.to_thread(Translator.for_engine, engine, name="own")
        ref = image_ref(str(scene))
        content = [{"type": "image", "image": ref}, {"type": "text", "text": QUESTION}]
        request = GenerationRequest(({"role": "user", "content": content},), max_tokens=1,
                                    choices=("A", "B"))  # fmt: skip
        final = None
        prompt = translator.prompt(request)
        params = translator.sampling_params(request)
        async for out in engine.generate(prompt, params, request.request_id):
            final = out
        gen = translator.generation(final, request, latency_s=0.1, ttft_s=None)
        assert gen.text in ("A", "B") and gen.model == "own" and gen.image_tokens > 0
        backend = VLLMBackend.from_engine(engine, name="wrapped")
        again = await backend.generate(request)
        assert again.text in ("A", "B") and again.prompt_tokens == gen.prompt_tokens
        backend.shutdown()  # not ours: the caller's engine keeps running
        assert not engine.errored
    finally:
        engine.shutdown()


async def test_shutdown_when_the_sigterm_lands_on_a_side_thread_of_an_idle_core(
    tiny_pair, monkeypatch
):
    """vLLM stops a core with SIGTERM; when the kernel gives it to a thread other than the
    core's main thread, which sleeps on an empty input queue, the core's handler waits for a
    message. Shutdown nudges the core, so it still exits by itself, in seconds, not killed."""
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    from mai_graph.backends.vllm import ENGINE_EXIT_GRACE_S, VLLMBackend

    backend = VLLMBackend(str(tiny_pair[0]), name="tiny-small")
    await backend.start(warmup=False)
    pids = backend.engine_processes()
    (core,) = backend.handle.engine.engine_core.resources.engine_manager.processes
    signalled = []
    monkeypatch.setattr(
        core, "terminate", lambda: signalled.append(signal_side_thread(core.pid, signal.SIGTERM))
    )
    start = time.monotonic()
    await asyncio.to_thread(backend.shutdown)
    took = time.monotonic() - start
    assert signalled, "vLLM did not stop the core with terminate()"
    assert core.exitcode == 0, f"the engine core was killed (exit code {core.exitcode})"
    assert took < ENGINE_EXIT_GRACE_S / 2, f"shutdown took {took:.1f} s"
    assert not alive(pids), f"left behind: {alive(pids)}"
    print(f"shutdown with the SIGTERM on thread {signalled[0]}: {took:.1f} s, exit code 0")


# -- cancellation bursts on the session's engines -------------------------------------------------


@pytest.mark.parametrize("engines", ["vllm"], indirect=True)
async def test_burst_of_cancelled_runs_leaves_no_orphan_request(engines, scene):
    _, small, large = engines
    long = MAIContext(cot_max_tokens=1500, cot_min_tokens=1500, short_max_tokens=4)
    pair = steered(small, large, DISAGREE)
    tasks = [
        asyncio.create_task(arun(QUESTION, str(scene), options=OPTIONS, context=long, **pair))
        for _ in range(24)
    ]
    await wait_until(lambda: small.running_requests() > 0, 60, "nothing started")
    # The engines are paused while the cancels go out (a CPU engine that is generating can hold
    # this process back until its runs are done); the runs stand at different stages (verify,
    # reasoning, queued), and every abort reaches the engine cores once they go on.
    with paused(small.engine_processes() + large.engine_processes()):
        finished = [t for t in tasks if t.done()]  # before the pause: nothing to cancel
        for i, task in enumerate(tasks):
            task.cancel()
            await asyncio.sleep(0.05 if i % 3 else 0.3)
        results = await asyncio.gather(*tasks, return_exceptions=True)
    cancelled = [r for t, r in zip(tasks, results, strict=True) if t not in finished]
    assert len(cancelled) >= len(tasks) // 2, f"{len(finished)} runs ended before the cancels"
    assert all(isinstance(r, asyncio.CancelledError) for r in cancelled), results
    start = time.monotonic()
    for backend in (small, large):
        await wait_until(lambda b=backend: b.running_requests() == 0, 15, "front end kept some")
        deadline = time.monotonic() + 15
        while not await backend.engine_idle():  # the engine core's scheduler, asked directly
            assert time.monotonic() < deadline, f"{backend.name}'s engine core kept requests"
            await asyncio.sleep(0.1)
    print(f"24 cancelled runs: both engines idle {time.monotonic() - start:.2f} s later")
    result = await arun(QUESTION, str(scene), options=OPTIONS, **steered(small, large, AGREE))
    assert result.route == "agree"


# -- `vllm serve`: slower than the timeout, killed mid-stream, then not running -------------------


def running(base):
    _, text = get(f"{base}/metrics")
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:num_requests_running metric")


@pytest.mark.server
async def test_vllm_serve_slow_killed_and_down(tiny_pair, tmp_path):
    pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")
    pytest.importorskip("openai", reason="installed with the openai extra")
    import psutil

    from mai_graph import GenerationRequest
    from mai_graph.backends.openai import OpenAIBackend

    port = free_port()
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_pair[0]),
           "--served-model-name", "tiny-small", "--host", "127.0.0.1", "--port", str(port),
           "--enforce-eager", "--gpu-memory-utilization", "0.05", "--block-size", "32",
           "--max-model-len", "8192"]  # fmt: skip
    base, url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/v1"

    def talk(tokens):
        content = [{"type": "text", "text": "Talk."}]
        request = ({"role": "user", "content": content},)
        return GenerationRequest(request, max_tokens=tokens, min_tokens=tokens, purpose="cot")

    with serving(cmd, f"{base}/health", tmp_path / "server.log", env=env) as proc:
        tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        # 1. Slower than the timeout: fails in time, and the server stops working on it.
        start = time.monotonic()
        with pytest.raises(BackendError, match="did not finish within timeout_s=2 s") as err:
            await OpenAIBackend.from_url(url, "tiny-small", timeout_s=2).generate(talk(3000))
        # A CPU engine can starve this process while it generates, so the bound is loose: the
        # point is a typed, transient error, and that the server then stops working on it.
        assert err.value.transient and time.monotonic() - start < 15
        print(f"timeout_s=2: failed after {time.monotonic() - start:.2f} s")
        deadline = time.monotonic() + 20
        while running(base) > 0:
            assert time.monotonic() < deadline, "the server kept generating after the timeout"
            await asyncio.sleep(0.2)

        # 2. Killed with a request in flight: the request fails at once with a transient error.
        # The engine processes are paused first, so the kill lands while the request is inside
        # the server however fast the engine is (and however hard a CPU engine starves this
        # process while it generates).
        with paused(tree[1:]):
            backend = OpenAIBackend.from_url(url, "tiny-small")
            task = asyncio.create_task(backend.generate(talk(3000)))
            await asyncio.sleep(1.0)
            assert not task.done(), f"the request ended before the kill: {task.exception()!r}"
            for pid in alive(tree):  # the server and the engine processes it started
                os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(BackendError, match="tiny-small: the connection to the server broke"):
            await task
        assert task.exception().transient
        assert time.monotonic() - start < 10
        print(f"server killed mid-stream: request failed {time.monotonic() - start:.2f} s later")
        proc.wait(timeout=10)

    # 3. Not running: a whole graph run fails fast, naming the model.
    down = OpenAIBackend.from_url(url, "tiny-small")
    start = time.monotonic()
    with pytest.raises(BackendError, match="tiny-small: server unreachable") as err:
        await arun(QUESTION, options=OPTIONS, small=down, large=down)
    assert err.value.transient and time.monotonic() - start < 10
    print(f"server down: the run failed after {time.monotonic() - start:.2f} s (3 attempts)")
    await wait_until(lambda: not alive(tree), 15, f"left behind: {alive(tree)}")
