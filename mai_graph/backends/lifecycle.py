"""Starting and stopping the engines of a set of backends (CLI, demo, tests, benchmarks)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from mai_graph.backends.base import ManagedBackend

__all__ = ["shutdown_backends", "start_backends"]


async def start_backends(*backends: object) -> None:
    """Start (and warm up) engines one after the other; backends without engines are skipped.

    One after the other, because two engines starting at once compete for memory and cores.
    """
    for backend in backends:
        if isinstance(backend, ManagedBackend):
            await backend.start()


def shutdown_backends(*backends: object) -> None:
    """Shut engines down, all at once (backends without engines are skipped); idempotent.

    At once, because each engine's processes take seconds to exit and wait for nothing shared.
    The first error is raised after every engine was asked to stop.
    """
    managed = [b for b in backends if isinstance(b, ManagedBackend)]
    if len(managed) <= 1:
        for backend in managed:
            backend.shutdown()
        return
    with ThreadPoolExecutor(len(managed), thread_name_prefix="mai-graph-shutdown") as pool:
        futures = [pool.submit(backend.shutdown) for backend in managed]
    for future in futures:
        future.result()
