"""One in-process vLLM engine's life: start, death, restart, processes, teardown.

:class:`EngineHandle` owns an ``AsyncLLM`` and nothing of what requests mean (that is
:mod:`~mai_graph.backends.vllm.translate`): it builds the engine's arguments with every memory
setting explicit, starts it (one engine at a time, under a process-wide lock, and on a GPU all
engines of a lineup in order, :class:`~mai_graph.backends.vllm.startup.EngineGroup`), notices
its death, starts it again within :data:`RESTART_WINDOW_S` and ``max_restarts`` once the dead
engine's processes and memory are gone, and stops it (:mod:`~mai_graph.backends.vllm.teardown`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mai_graph.backends.vllm import compat
from mai_graph.backends.vllm.teardown import (
    ENGINE_EXIT_GRACE_S,
    REAP_GRACE_S,
    close_client,
    core_pids,
    processes_of,
    reap,
    stop_engine,
)
from mai_graph.errors import BackendError, ConfigError
from mai_graph.jsonin import parse_gib
from mai_graph.loop import BackgroundLoop

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

    from mai_graph.backends.vllm.startup import EngineGroup

__all__ = [
    "CPU_BLOCK_SIZE",
    "GPU_BLOCK_SIZE",
    "RESTART_WINDOW_S",
    "WORKER_EXIT_GRACE_S",
    "EngineHandle",
]

log = logging.getLogger(__name__)

WORKER_EXIT_GRACE_S = 20
"""Seconds an engine core waits for its worker to exit by itself (vLLM's default: 5)."""

RESTART_WINDOW_S = 600.0
"""Engine deaths are counted over this many seconds against ``max_restarts``."""

_START_LOCK = threading.Lock()  # engines start one after the other

CPU_BLOCK_SIZE = 32
"""KV block size on vLLM's CPU build (its attention backend needs a multiple of 32)."""

GPU_BLOCK_SIZE = 16
"""KV block size on a GPU, set explicitly: prefix-cache hits are whole blocks, and vLLM 0.34's
default of 64 (0.32: 16) would coarsen them fourfold."""


def _on_cpu() -> bool:
    return compat.on_cpu()


def _forget(handle: EngineHandle) -> None:
    from mai_graph.backends.vllm.startup import forget

    forget(handle)


class EngineHandle:
    """The life of one ``AsyncLLM`` (see the module's docstring).

    Args:
        model: Checkpoint path or hub id.
        name: The engine's name in messages.
        options: mai-graph's own engine options (``gpu_memory_utilization``, ``kv_cache_gib``,
            ``max_model_len``, ``block_size``, ``enforce_eager``, ``seed``).
        engine_kwargs: Passed through to ``vllm.AsyncEngineArgs``.
        media_limits: ``limit_mm_per_prompt``.
        max_restarts: Restarts allowed within :data:`RESTART_WINDOW_S`.
        loop: The loop the engine lives on (None: the caller's, for an adopted engine).
        on_start: Called (in a worker thread) each time a new engine has started.
    """

    def __init__(
        self,
        model: str,
        name: str,
        options: Mapping[str, Any],
        engine_kwargs: Mapping[str, Any],
        media_limits: Mapping[str, int],
        max_restarts: int,
        loop: BackgroundLoop | None,
        on_start: Callable[[], None],
    ) -> None:
        self.model = model
        self.name = name
        self._options = dict(options)
        self._engine_kwargs = dict(engine_kwargs)
        self.media_limits = dict(media_limits)
        self.max_restarts = max_restarts
        self.restarts = 0
        """How many times a dead engine was started again."""
        self._loop = loop
        self._on_start = on_start
        self._engine: AsyncLLM | None = None
        self._owns_engine = True
        self._start_lock: asyncio.Lock | None = None
        self._procs: list[Any] = []  # psutil.Process of the engine's core and workers
        self._deaths: list[float] = []
        self._death: str | None = None
        self._retired: weakref.WeakSet[AsyncLLM] = weakref.WeakSet()
        self._dead_procs: list[Any] = []  # a dead engine's processes, until a restart saw them go
        self._group: EngineGroup | None = None
        """The lineup this engine starts with (None: it starts on its own)."""
        self._unplanned_share = False
        self._share: float | None = None  # the share the running engine started with

    @property
    def engine(self) -> AsyncLLM | None:
        """The running engine (None: not started, shut down, or dead)."""
        return self._engine

    @property
    def started(self) -> bool:
        """Whether the engine is running."""
        return self._engine is not None

    def adopt(self, engine: AsyncLLM) -> None:
        """Serve a caller's own running ``AsyncLLM`` (never restarted or stopped here)."""
        self._engine = engine
        self._owns_engine = False
        self._loop = None

    def retired(self, engine: AsyncLLM) -> bool:
        """Whether ``engine`` was shut down by :meth:`shutdown` (its requests then failed)."""
        return engine in self._retired

    async def start(self) -> None:
        """Start the engine if it is not running (on a GPU, with its whole lineup)."""
        await self._start()

    def engine_args(self, share: float | None = None) -> Any:
        """The ``AsyncEngineArgs`` this engine starts with.

        Every memory setting is explicit, so no vLLM default decides it (vLLM 0.34 moved the
        share's default to 1.0 and the block size's to 64): the share (``share``, else the
        option, else 0.05 on the CPU and :data:`~mai_graph.backends.vllm.startup.
        SOLE_ENGINE_SHARE` on a GPU), the block size, and the KV pool when one is given
        (``kv_cache_gib`` -> vLLM's ``kv_cache_memory_bytes``, on both platforms).

        Raises:
            ConfigError: ``skip_mm_profiling`` on a GPU without a fixed KV pool (vLLM would
                hand the vision encoder's unmeasured peak to the KV cache).
        """
        from vllm import AsyncEngineArgs

        from mai_graph.backends.vllm.startup import SOLE_ENGINE_SHARE

        cpu = _on_cpu()
        o = self._options
        if share is None:
            share = o["gpu_memory_utilization"] or (0.05 if cpu else SOLE_ENGINE_SHARE)
        kwargs: dict[str, Any] = dict(
            model=self.model,
            max_model_len=o["max_model_len"],
            enforce_eager=cpu if o["enforce_eager"] is None else o["enforce_eager"],
            enable_prefix_caching=True,
            seed=o["seed"],
            limit_mm_per_prompt=dict(self.media_limits),
            gpu_memory_utilization=share,
            block_size=o["block_size"] or (CPU_BLOCK_SIZE if cpu else GPU_BLOCK_SIZE),
        )
        kv_bytes = self.kv_cache_bytes(cpu)
        if kv_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = kv_bytes
        if os.environ.get("MAI_GRAPH_QUIET"):  # the CLI's quiet mode: no loading progress bars
            kwargs["use_tqdm_on_load"] = False
        kwargs.update(self._engine_kwargs)
        if not cpu and kwargs.get("skip_mm_profiling") and not kwargs.get("kv_cache_memory_bytes"):
            # vllm/v1/worker/gpu_worker.py:determine_available_memory sizes the KV cache from
            # the profiled peak; without the vision encoder in it, that peak goes to the cache.
            raise ConfigError(
                f"{self.name}: skip_mm_profiling=True on a GPU leaves the vision encoder's "
                "memory peak unmeasured, and vLLM would give that memory to the KV cache",
                parameter="skip_mm_profiling",
                value=True,
                fix="drop skip_mm_profiling on a GPU (it is a CPU test setting), or fix the KV "
                "pool yourself with kv_cache_gib (the memory plan does)",
            )
        return AsyncEngineArgs(**kwargs)

    def kv_cache_bytes(self, cpu: bool | None = None) -> int | None:
        """The fixed KV pool this engine asks vLLM for (``kv_cache_memory_bytes``), if any.

        ``kv_cache_gib`` on either platform; on the CPU, without it, the user's
        ``VLLM_CPU_KVCACHE_SPACE`` (GiB) or 1 GiB. ``None`` on a GPU without ``kv_cache_gib``
        (vLLM sizes the pool from the share).
        """
        cpu = _on_cpu() if cpu is None else cpu
        if self._engine_kwargs.get("kv_cache_memory_bytes") is not None:
            return int(self._engine_kwargs["kv_cache_memory_bytes"])
        gib = self._options["kv_cache_gib"]
        if gib is None and cpu:
            env = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
            gib = parse_gib(env, parameter="VLLM_CPU_KVCACHE_SPACE", default=1.0)
        return None if gib is None else int(float(gib) * (1 << 30))

    def _alive(self) -> bool:
        engine = self._engine
        return engine is not None and not getattr(engine, "errored", False)

    def _build_engine(self) -> None:
        """Build the engine into ``_engine`` (blocking; engines start one after the other).

        It stores the engine rather than returning it: an idle worker thread keeps its last
        result alive, which would keep a shut-down engine until the interpreter exits. The
        process environment is read and written under the start lock only, so two engines
        starting at once never see each other's settings.
        """
        from vllm.v1.engine.async_llm import AsyncLLM

        from mai_graph.backends.vllm import startup

        cpu = _on_cpu()
        with _START_LOCK:
            startup.prepare_process()
            # The engine core waits this long for its worker to exit before signalling it (the
            # engine core reads it at shutdown); within ENGINE_EXIT_GRACE_S, with room to spare.
            os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", str(WORKER_EXIT_GRACE_S))
            share = startup.check_share(self, self._options["gpu_memory_utilization"], cpu)
            try:
                args = self.engine_args(share=share)
                self._share = float(args.gpu_memory_utilization)
                # vllm/platforms/cpu.py:check_and_update_config lets VLLM_CPU_KVCACHE_SPACE
                # override kv_cache_memory_bytes: the engine's own pool decides (the spawned
                # core inherits the environment as it is now).
                saved = os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None) if cpu else None
                cores = startup.cpu_cores(self) if cpu else None  # its own cores, not auto's
                if cores is not None:
                    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cores
                try:
                    self._engine = AsyncLLM.from_engine_args(args)
                finally:
                    if saved is not None:
                        os.environ["VLLM_CPU_KVCACHE_SPACE"] = saved
                    if cores is not None:
                        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
            except BaseException:
                startup.forget(self)
                raise

    def _devices(self) -> list[int]:
        """The CUDA devices this engine uses (``device_ids``, else the first TP-size ones)."""
        ids = self._engine_kwargs.get("device_ids")
        if ids:
            return [int(i) for i in ids]
        return list(range(int(self._engine_kwargs.get("tensor_parallel_size") or 1)))

    async def _after_death(self) -> None:
        """Before a restart: the dead engine's processes gone and, on a GPU, its memory free.

        vLLM's start check (``request_memory``) reads free memory once; a dead engine's CUDA
        memory is released only when its processes have exited.
        """
        from mai_graph.backends.vllm import startup

        procs, self._dead_procs = self._dead_procs, []
        if procs:
            left = await asyncio.to_thread(
                startup.wait_for_exit, procs, ENGINE_EXIT_GRACE_S + 2 * REAP_GRACE_S
            )
            if left:
                log.warning("%s: %d process(es) of the dead engine still run", self.name,
                            len(left))  # fmt: skip
        if not await asyncio.to_thread(_on_cpu):
            share = self._options["gpu_memory_utilization"] or startup.SOLE_ENGINE_SHARE
            await asyncio.to_thread(startup.wait_for_memory, self._devices(), float(share))

    async def _start(self) -> None:
        if self._alive():
            return
        group = self._group
        # The platform check imports vLLM the first time: off the event loop.
        if group is not None and group.in_order(await asyncio.to_thread(_on_cpu)):
            # A lineup on a GPU: every engine starts, in order, before any serves.
            await group.start_all(lambda member: member._start_own())
            return
        await self._start_own()

    async def _start_own(self) -> None:
        if self._alive():
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._alive():
                return
            if self._engine is not None:  # died between requests
                self._discard(self._engine, "while idle")
            if self._death is not None:
                self._check_restart()
                await self._after_death()
            try:  # off the event loop: starting an engine imports, reads files, waits on processes
                await asyncio.to_thread(self._build_engine)
            except Exception as exc:
                if self._death is not None:  # a failed restart counts as another death
                    self._deaths.append(time.monotonic())
                raise BackendError(
                    f"vLLM engine for {self.model!r} failed to start: {exc}",
                    parameter="model",
                    value=self.model,
                    fix="check the model path and the memory settings "
                    "(gpu_memory_utilization / kv_cache_gib / max_model_len)",
                ) from exc
            assert self._engine is not None
            self._procs = await asyncio.to_thread(processes_of, core_pids(self._engine))
            if self._death is not None:
                self.restarts += 1
                log.warning("%s: started a new vLLM engine after it died (%s)", self.name,
                            self._death)  # fmt: skip
            await asyncio.to_thread(self._on_start)  # e.g. reads the processor's files

    def _check_restart(self) -> None:
        """Raise the engine's death, if it died more than ``max_restarts`` times lately."""
        now = time.monotonic()
        self._deaths = [t for t in self._deaths if now - t < RESTART_WINDOW_S]
        if not self._owns_engine:
            raise BackendError(
                f"{self.name}: the vLLM engine you passed to from_engine() died ({self._death})",
                parameter="engine",
                fix="build a new AsyncLLM and wrap it with VLLMBackend.from_engine()",
            )
        if len(self._deaths) > self.max_restarts:
            raise BackendError(
                f"{self.name}: the vLLM engine of {self.model!r} died ({self._death}) and is not "
                f"started again: {len(self._deaths)} deaths in the last "
                f"{RESTART_WINDOW_S:.0f} s, max_restarts={self.max_restarts}",
                parameter="model",
                value=self.model,
                fix="find the cause in the engine's log (out of memory?), then call "
                "backend.shutdown() and start it again",
            )

    def _discard(self, engine: AsyncLLM, when: str) -> None:
        """Forget a dead engine: release its client, reap its processes, count the death."""
        if self._engine is not engine:
            return  # already discarded (another request saw the same death)
        self._engine = None
        self._death = f"engine core exited {when}"
        self._deaths.append(time.monotonic())
        log.error("%s: the vLLM engine of %r died %s", self.name, self.model, when)
        procs, self._procs = self._procs, []
        self._dead_procs = list(procs)
        _forget(self)
        with contextlib.suppress(Exception):
            engine.shutdown(timeout=0)
        close_client(engine)
        if procs:
            reaper = functools.partial(reap, procs, REAP_GRACE_S, "a dead vLLM engine")
            threading.Thread(target=reaper, daemon=True).start()

    def dead_error(self, engine: AsyncLLM, request_id: str) -> BackendError:
        """The error of a request that saw ``engine`` die (the death is counted once)."""
        self._discard(engine, f"during request {request_id}")
        if not self._owns_engine:
            restart = "wrap a new AsyncLLM with VLLMBackend.from_engine()"
        elif len(self._deaths) <= self.max_restarts:
            restart = "the next request starts a new engine"
        else:
            restart = "it is not started again (max_restarts reached); call backend.shutdown()"
        return BackendError(
            f"{self.name}: the vLLM engine of {self.model!r} died (its engine core process "
            f"exited) during request {request_id}",
            parameter="model",
            value=self.model,
            fix=f"{restart}; look for the cause in the engine's log (out of memory? killed?)",
        )

    def shutdown(self) -> None:
        """Stop the engine and free its memory and processes (a later request starts it again).

        Requests still running fail with a ``BackendError`` saying so. The output handler
        stops first (so the engine's exit is not reported as a failure), then the engine core
        and its worker get :data:`ENGINE_EXIT_GRACE_S` to exit by themselves (the core is
        nudged until it sees vLLM's SIGTERM, see :mod:`mai_graph.backends.vllm.teardown`);
        this thread waits until they are gone, the engine loop keeps serving other engines.
        Also clears the record of engine deaths (``max_restarts`` counts afresh).
        """
        engine, self._engine = self._engine, None
        procs = self._procs
        self._deaths, self._death, self._procs = [], None, []
        _forget(self)
        if engine is None or not self._owns_engine:
            return
        self._retired.add(engine)
        stop_engine(engine, self._loop, procs, f"the vLLM engine of {self.model!r}")

    def memory_report(self) -> dict[str, Any]:
        """What this engine asked vLLM for, and what vLLM reported once it started.

        ``platform``, ``memory_mode`` (``kv_bytes``: a fixed pool; ``share``: vLLM sizes it;
        ``kv_cache_gib`` on the CPU), ``gpu_memory_utilization``, ``kv_cache_bytes`` asked,
        ``kv_blocks`` x ``block_size`` = ``kv_tokens`` vLLM allocated (None before the start),
        and the worker ``start_method``.
        """
        cpu = _on_cpu()
        asked = self.kv_cache_bytes(cpu)
        blocks, size = compat.kv_cache_blocks(self._engine) if self._engine else (None, None)
        return {
            "platform": "cpu" if cpu else "cuda",
            "memory_mode": "kv_cache_gib" if cpu else ("kv_bytes" if asked else "share"),
            "gpu_memory_utilization": self._share,
            "kv_cache_bytes": asked,
            "kv_blocks": blocks,
            "block_size": size,
            "kv_tokens": blocks * size if blocks and size else None,
            "start_method": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") or "fork (vLLM's)",
        }

    def engine_processes(self) -> list[int]:
        """Process ids of the running engine's core process and its workers (empty if none)."""
        return [p.pid for p in self._procs] if self._engine is not None else []
