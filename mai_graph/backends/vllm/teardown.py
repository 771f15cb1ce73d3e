"""Stopping an in-process vLLM engine: its requests, its core and worker processes, its client.

vLLM stops an engine core with SIGTERM. The core's Python handler runs on the core's main
thread, and an idle core's main thread sleeps on its input queue without a timeout. When the
kernel hands the signal to another of the core's threads (measured: about one shutdown in
eight on a loaded 2-core machine), the handler waits until a message arrives, so the core sits
out the whole grace period and is killed, leaking its shared memory. :func:`stop_engine`
therefore nudges the core with a harmless message (an abort of a request id that does not
exist) every :data:`WAKE_INTERVAL_S` until the core has exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mai_graph.backends.vllm import compat
from mai_graph.loop import BackgroundLoop

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

__all__ = [
    "ENGINE_EXIT_GRACE_S",
    "REAP_GRACE_S",
    "WAKE_INTERVAL_S",
    "close_client",
    "core_pids",
    "processes_of",
    "reap",
    "stop_engine",
]

log = logging.getLogger(__name__)

ENGINE_EXIT_GRACE_S = 30.0
"""Seconds a shut-down engine core (and its worker) may take to exit before it is killed.
vLLM's default of 5 s is shorter than a loaded CPU machine needs to tear down two processes."""

WAKE_INTERVAL_S = 1.0
"""Seconds between the nudges that let a stopping engine core see its SIGTERM."""

REAP_GRACE_S = 5.0
"""Seconds the processes of a stopped engine get to disappear before they are killed."""

_WAKE_ID = "mai-graph-shutdown-wake"  # a request id no request has: aborting it does nothing


class ShutDown(Exception):
    """Ends the requests still running when their engine is shut down."""


def end_running_requests(engine: AsyncLLM) -> None:
    """Fail the requests still running (they would otherwise wait for outputs forever)."""
    with contextlib.suppress(Exception):
        compat.fail_running_requests(engine, ShutDown())


async def _stop_output_handler(engine: AsyncLLM) -> None:
    """End running requests, then cancel the output handler.

    Cancelled, the handler does not report the engine's exit as a failure.
    """
    end_running_requests(engine)
    await asyncio.sleep(0)  # let the requests see it and abort themselves in the engine
    handler = compat.output_handler(engine)
    if handler is not None and not handler.done():
        handler.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await handler


def close_client(engine: AsyncLLM) -> None:
    """Close the engine client's ZMQ context (call on the engine's loop, after ``shutdown``).

    vLLM closes the client's sockets but leaves the context to the garbage collector, which
    warns about it.
    """
    ctx = compat.zmq_context(engine)
    if ctx is not None and not ctx.closed:
        with contextlib.suppress(Exception):
            ctx.destroy(linger=0)


async def _aclose_client(engine: AsyncLLM) -> None:
    close_client(engine)


def core_pids(engine: AsyncLLM) -> list[int]:
    """Process ids of the engine's core process(es)."""
    return [p.pid for p in compat.core_processes(engine) if p.pid is not None]


def processes_of(pids: list[int]) -> list[Any]:
    """``psutil.Process`` handles of ``pids`` and their children (an engine core's workers).

    A handle remembers its process's start time, so a later signal through it can never reach
    another program that got the pid after the process ended. Reads /proc (blocking).
    """
    import psutil

    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            found += [process, *process.children(recursive=True)]
    return found


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def reap(processes: list[Any], grace_s: float, what: str) -> None:
    """Wait up to ``grace_s`` for ``processes`` (``psutil.Process``) to exit, then kill the rest.

    Blocking. ``what`` names the engine in the warning logged for each process killed; a
    process whose pid now belongs to another program is left alone (psutil checks).
    """
    import psutil

    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            log.warning("killing process %d left behind by %s", proc.pid, what)
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)


async def _nudge(engine: AsyncLLM) -> None:
    with contextlib.suppress(Exception):
        await compat.abort_requests(engine, [_WAKE_ID])


@contextlib.contextmanager
def _waking(engine: AsyncLLM, loop: BackgroundLoop, cores: list[int]) -> Iterator[None]:
    """Nudge the engine's cores from a side thread until they exited or the block ends."""
    done = threading.Event()

    def nudge_until_exit() -> None:
        while not done.wait(WAKE_INTERVAL_S) and any(_running(pid) for pid in cores):
            with contextlib.suppress(Exception):
                loop.submit(_nudge(engine)).result(timeout=WAKE_INTERVAL_S * 5)

    waker = threading.Thread(target=nudge_until_exit, name="mai-graph-engine-wake", daemon=True)
    waker.start()
    try:
        yield
    finally:
        done.set()
        waker.join()


def stop_engine(
    engine: AsyncLLM, loop: BackgroundLoop | None, processes: list[Any], what: str
) -> None:
    """Stop an engine built on ``loop``: fail its requests, stop its processes, close its client.

    Blocks until the engine's ``processes`` (``psutil.Process`` of its core and workers) have
    exited: at most about :data:`ENGINE_EXIT_GRACE_S` plus twice :data:`REAP_GRACE_S`; the
    engine loop keeps serving other engines meanwhile. Called on the engine loop itself
    (which cannot serve the nudges then), the core may need the whole grace period. The nudge
    reaches one engine core: with vLLM's data parallelism, the other cores rely on the signal
    alone. Should the stop fail before vLLM signalled the processes, they get SIGTERM here, so
    they can still exit by themselves before they are killed.
    """
    signalled = False
    try:
        if loop is not None and not loop._in_loop():
            loop.run(_stop_output_handler(engine))
            with _waking(engine, loop, core_pids(engine)):
                signalled = True
                engine.shutdown(timeout=ENGINE_EXIT_GRACE_S)
            # vLLM closes the client's sockets on the engine loop (queued by shutdown); the
            # context is closed after them, in turn.
            loop.run(_aclose_client(engine))
        else:
            end_running_requests(engine)
            signalled = True
            engine.shutdown(timeout=ENGINE_EXIT_GRACE_S)
            close_client(engine)
    finally:
        if not signalled:
            _terminate(processes)
        if processes:
            reap(processes, REAP_GRACE_S, what)


def _terminate(processes: list[Any]) -> None:
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
