"""mai-graph's one background event loop, on a daemon thread: sync callers and engines share it.

Async engines (vLLM's ``AsyncLLM``) are bound to the loop they started in. They all start on
:func:`shared_loop`, the loop sync code (``run()``, ``graph.invoke``, the chat model's
``invoke``) also runs the graph on, so a sync run never changes loops between the graph and
its engines; callers on loops of their own (``langgraph dev``, notebooks, the endpoint, tests)
hop to it once per model call and share the same engines.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["BackgroundLoop", "on_caller_loop", "run_sync", "shared_loop"]

T = TypeVar("T")


class BackgroundLoop:
    """An event loop running forever on a daemon thread, started on first use."""

    def __init__(self, name: str = "mai-graph-loop") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop (started on first access)."""
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=serve, name=self.name, daemon=True).start()
                ready.wait()
                self._loop = loop
            return self._loop

    def _in_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop; returns a concurrent future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and block until it finishes (from any other thread)."""
        if self._in_loop():
            coro.close()
            raise RuntimeError(f"{self.name}: run() called from its own loop; await arun()")
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the loop from any loop; cancelling the caller cancels it there."""
        if self._in_loop():
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    def close(self) -> None:
        """Stop the loop thread (the loop restarts on next use)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)


def on_caller_loop(fn: Callable[[T], None]) -> Callable[[T], None]:
    """Wrap a callback so it always runs on the loop that is running now (the caller's).

    Engines call it from their own loop or a worker thread; the wrapped call is handed over
    with ``call_soon_threadsafe`` (in order), or made directly when already on that loop.
    """
    loop = asyncio.get_running_loop()

    def deliver(value: T) -> None:
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            fn(value)
        else:
            loop.call_soon_threadsafe(fn, value)

    return deliver


_DEFAULT = BackgroundLoop()


def shared_loop() -> BackgroundLoop:
    """mai-graph's shared background loop (sync entry points run their coroutines on it)."""
    return _DEFAULT


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code on mai-graph's shared background loop."""
    return _DEFAULT.run(coro)
