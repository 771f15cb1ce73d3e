"""Starting and stopping the engines of a set of backends (CLI, demo, tests, benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from mai_graph.backends.base import ManagedBackend, capabilities_of

__all__ = ["shutdown_backends", "start_backends"]


def _managed(backends: Sequence[object]) -> list[ManagedBackend]:
    """The backends with engines, each once; lists (drafters, a chain) are walked into."""
    found: dict[int, ManagedBackend] = {}

    def walk(items: Sequence[object]) -> None:
        for backend in items:
            if isinstance(backend, list | tuple):
                walk(backend)
            elif capabilities_of(backend).managed:
                found.setdefault(id(backend), cast(ManagedBackend, backend))

    walk(backends)
    return list(found.values())


async def start_backends(*backends: object) -> None:
    """Start (and warm up) engines one after the other; backends without engines are skipped.

    One after the other, because two engines starting at once compete for memory and cores.
    An argument may be a list of backends (drafters, a chain).
    """
    for backend in _managed(backends):
        await backend.start()


def shutdown_backends(*backends: object) -> None:
    """Shut engines down, all at once (backends without engines are skipped); idempotent.

    At once, because each engine's processes take seconds to exit and wait for nothing shared.
    The first error is raised after every engine was asked to stop.
    """
    managed = _managed(backends)
    if len(managed) <= 1:
        for backend in managed:
            backend.shutdown()
        return
    with ThreadPoolExecutor(len(managed), thread_name_prefix="mai-graph-shutdown") as pool:
        futures = [pool.submit(backend.shutdown) for backend in managed]
    for future in futures:
        future.result()
