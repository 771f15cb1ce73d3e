"""Starting and stopping the engines of a set of backends (CLI, demo, tests, benchmarks)."""

from __future__ import annotations

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
    """Shut engines down (backends without engines are skipped); idempotent."""
    for backend in backends:
        if isinstance(backend, ManagedBackend):
            backend.shutdown()
