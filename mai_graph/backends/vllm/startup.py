"""What starting an in-process vLLM engine needs that vLLM's CPU build never shows.

vLLM's CPU build forces ``spawn`` and is handed its memory by the backend; on a GPU vLLM 0.32
does neither, and the first GPU run of co-resident engines fails in ways the CPU hides. Each
rule here is what a GPU start relies on, with the vLLM function it answers to:

- **spawn, not fork.** ``VLLM_WORKER_MULTIPROC_METHOD`` defaults to ``fork`` on CUDA
  (``vllm/envs.py``; only ``vllm/platforms/cpu.py`` forces ``spawn``). A fork from a process
  that already runs tokenizers' thread pools, ZMQ I/O threads and mai-graph's engine loop is
  a known silent hang, so :func:`prepare_process` sets ``spawn`` before the first engine,
  unless the user chose a method.
- **Device order.** NVML (the memory plan's probe) numbers cards by PCI bus; CUDA numbers them
  fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. :func:`prepare_process` sets that
  order before CUDA is initialized, so plan index *i* is vLLM's device *i*.
- **One share per engine.** Each engine's start checks ``free >= total x
  gpu_memory_utilization`` (``vllm/v1/worker/utils.py:request_memory``). vLLM's default share
  (0.92 in 0.32; ``None`` -> 1.0 with 0.34's extensible KV cache) leaves nothing for a second
  engine, so an engine without a share may only run alone on a GPU (:func:`check_share`).
- **In order, before the first request.** vLLM profiles memory device-wide but relative to the
  engine's own start (``vllm/utils/mem_utils.py:memory_profiling``): what another engine
  allocates meanwhile is charged to the one profiling. :class:`EngineGroup` starts every
  engine of a lineup, one after the other, before any of them serves.
- **CPU engines get cores of their own.** vLLM's CPU build binds an engine's compute threads
  by ``VLLM_CPU_OMP_THREADS_BIND`` (``OMPProcessManager._parse_omp_threads_bind_env`` in
  ``vllm/utils/ompmultiprocessing.py``, built by ``MultiprocExecutor`` in the spawned engine
  core, so the variable as it is when the engine starts decides), and ``auto`` picks the same
  cores for every engine of a machine: a lineup's small and large engines compute on the same
  core, so MAI's two short answers, asked at once, take turns. :func:`cpu_cores` splits the
  cores this process may use between the lineup's engines instead (a CPU-only rule; a user's
  own setting wins).
- **A restart waits for the dead engine.** Its processes must have exited and its memory be
  free before the new engine runs the start check (:func:`wait_for_memory`), or one out-of-
  memory death uses up the restart budget.

Nothing here imports vLLM or torch at module import.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from mai_graph.errors import ConfigError

__all__ = [
    "SOLE_ENGINE_SHARE",
    "EngineGroup",
    "check_share",
    "cpu_cores",
    "device_memory",
    "prepare_process",
    "wait_for_memory",
    "wait_for_exit",
]

log = logging.getLogger(__name__)

SOLE_ENGINE_SHARE = 0.9
"""The share an engine without one gets when it runs alone on a GPU (set explicitly: vLLM's
own default moved from 0.92 in 0.32 to 1.0 under 0.34's extensible KV cache)."""

RESTART_MEMORY_WAIT_S = 60.0
"""Longest a restart waits for a dead engine's memory to be free again."""

POLL_S = 0.5
"""How often free memory is read while waiting."""

_lock = threading.Lock()
_running: weakref.WeakSet[Any] = weakref.WeakSet()
"""Backends whose engine runs in this process (GPU only; see :func:`check_share`)."""


def prepare_process(env: dict[str, str] | None = None) -> dict[str, str]:
    """Set what every engine start of this process relies on (idempotent); returns what it set.

    ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` and ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, each only when
    the user has not chosen one. A user's ``fork`` is kept, with a warning.

    >>> env = {}
    >>> prepare_process(env)
    {'VLLM_WORKER_MULTIPROC_METHOD': 'spawn', 'CUDA_DEVICE_ORDER': 'PCI_BUS_ID'}
    >>> prepare_process({"VLLM_WORKER_MULTIPROC_METHOD": "fork", "CUDA_DEVICE_ORDER": "X"})
    {}
    """
    env = os.environ if env is None else env  # type: ignore[assignment]
    assert env is not None
    set_here: dict[str, str] = {}
    for name, value in (("VLLM_WORKER_MULTIPROC_METHOD", "spawn"),
                        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")):  # fmt: skip
        if not env.get(name):
            env[name] = value
            set_here[name] = value
    if env.get("VLLM_WORKER_MULTIPROC_METHOD") == "fork" and env is os.environ:
        log.warning(
            "VLLM_WORKER_MULTIPROC_METHOD=fork: vLLM engines forked from a process that runs "
            "tokenizer and ZMQ threads can hang at start; unset it (mai-graph sets spawn)"
        )
    return set_here


def cpu_cores(handle: Any, available: Sequence[int] | None = None) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for a CPU engine of a lineup: its own block of cores.

    The lineup's engines (its :class:`EngineGroup`, in order) split ``available`` (default: the
    cores this process may run on) into contiguous blocks, the first ones one core larger when
    they do not divide evenly; with fewer cores than engines each gets one, in turn. ``None``
    (vLLM's own binding) for an engine outside a group of two or more, one that runs tensor
    parallel (its setting lists a block per rank), when the user set the variable, or where
    the system has no per-process core sets (``os.sched_getaffinity``: Linux).

    >>> class H:
    ...     _engine_kwargs = {}
    >>> group = EngineGroup()
    >>> small, large = H(), H()
    >>> group.add(small); group.add(large)
    >>> cpu_cores(small, [0, 1]), cpu_cores(large, [0, 1])
    ('0', '1')
    >>> cpu_cores(small, range(5)), cpu_cores(large, range(5))
    ('0,1,2', '3,4')
    >>> cpu_cores(large, [3])
    '3'
    """
    group = getattr(handle, "_group", None)
    if group is None or len(group.members) < 2 or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return None
    if int(getattr(handle, "_engine_kwargs", {}).get("tensor_parallel_size") or 1) > 1:
        return None
    if available is None and not hasattr(os, "sched_getaffinity"):
        return None  # no per-process core sets here (macOS): vLLM's own choice
    cores = sorted(os.sched_getaffinity(0) if available is None else available)
    n, i = len(group.members), group.members.index(handle)
    if len(cores) <= n:
        return str(cores[i % len(cores)])
    size, extra = divmod(len(cores), n)
    start = i * size + min(i, extra)
    return ",".join(str(c) for c in cores[start : start + size + (i < extra)])


def check_share(backend: Any, share: float | None, on_cpu: bool) -> float | None:
    """The share an engine starts with on a GPU, or a refusal when it cannot run beside others.

    An engine with a share is recorded as running; one without gets :data:`SOLE_ENGINE_SHARE`
    if no other engine runs in this process, and is refused if one does; a second engine is
    refused while an engine runs whose share assumed the whole card (none given, or
    ``_unplanned_share`` set by a one-model plan). On the CPU the backend sets its own.

    Raises:
        ConfigError: Two engines on a GPU, one of them without a share.
    """
    if on_cpu:
        return share
    with _lock:
        others = [b for b in _running if b is not backend]
        unplanned = [b for b in others if getattr(b, "_unplanned_share", False)]
        alone = share is None or getattr(backend, "_unplanned_share", False)
        if others and (alone or unplanned):
            names = ", ".join(getattr(b, "name", "?") for b in others)
            raise ConfigError(
                f"{getattr(backend, 'name', 'an engine')}: a second vLLM engine would start on "
                f"a GPU beside {names} without a share for each (vLLM's default share takes "
                "the whole card)",
                parameter="gpu_memory_utilization",
                value=share,
                fix="build the engines together so the memory plan gives each its share "
                "(mai_graph.deploy.build_lineup / backends_for / lineup_for), or pass "
                "gpu_memory_utilization to every VLLMBackend (`mai-graph plan` shows values)",
            )
        backend._unplanned_share = alone
        _running.add(backend)
    return SOLE_ENGINE_SHARE if share is None else share


def forget(backend: Any) -> None:
    """The backend's engine no longer runs (shut down or dead)."""
    with _lock:
        _running.discard(backend)


def wait_for_exit(processes: Sequence[Any], timeout_s: float) -> list[Any]:
    """Wait until ``processes`` (``psutil.Process``) have exited; returns those still alive.

    The same wait as the teardown's reaper (``psutil.wait_procs``), without the kill.
    """
    import psutil

    _, alive = psutil.wait_procs(list(processes), timeout=timeout_s)
    return list(alive)


def device_memory(index: int) -> tuple[int, int] | None:
    """``(free, total)`` bytes of CUDA device ``index`` from NVML (None: no NVML or device)."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML library or no driver
        return None
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ident: Any = index
        if visible:
            ids = [v.strip() for v in visible.split(",") if v.strip()]
            ident = ids[index] if index < len(ids) else index
        if isinstance(ident, str) and not ident.isdigit():
            handle = pynvml.nvmlDeviceGetHandleByUUID(ident)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(ident))
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.free), int(info.total)
    except Exception:  # noqa: BLE001 - no such device
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def wait_for_memory(
    devices: Sequence[int],
    share: float,
    timeout_s: float = RESTART_MEMORY_WAIT_S,
    *,
    probe: Callable[[int], tuple[int, int] | None] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> bool:
    """Wait until every device has ``share`` of its total free (vLLM's start check passes).

    Returns False when it is still short after ``timeout_s`` (the start then fails with
    vLLM's own message); True at once where memory cannot be read (no NVML).
    """
    probe = probe or device_memory
    sleep = sleep or (lambda seconds: time.sleep(seconds))
    deadline = time.monotonic() + timeout_s
    while True:
        short = []
        for index in devices:
            found = probe(index)
            if found is None:
                continue
            free, total = found
            if free < share * total:
                short.append((index, free, total))
        if not short:
            return True
        if time.monotonic() >= deadline:
            for index, free, total in short:
                log.warning(
                    "cuda:%d: %.2f GiB free of %.2f GiB, below the %.3f share the engine needs",
                    index, free / 2**30, total / 2**30, share,
                )  # fmt: skip
            return False
        sleep(POLL_S)


class EngineGroup:
    """The in-process engines of one lineup: on a GPU all start, in order, before any serves.

    :func:`~mai_graph.deploy.build.build_lineup` puts every ``VLLMBackend`` it builds in one
    group. The first request to any member (or its ``start()``) starts every member that is
    not running, one after the other, in the lineup's order; so no engine serves while another
    profiles memory. On the CPU (``ordered=None`` resolves to "on a GPU") engines keep
    starting on first use.
    """

    def __init__(self, ordered: bool | None = None) -> None:
        self.members: list[Any] = []
        self.ordered = ordered
        self._lock: asyncio.Lock | None = None

    def add(self, backend: Any) -> None:
        """Add a backend's engine (a ``VLLMBackend`` or its ``EngineHandle``)."""
        handle = getattr(backend, "handle", backend)
        self.members.append(handle)
        handle._group = self

    def in_order(self, on_cpu: bool) -> bool:
        """Whether members start together, in order (default: on a GPU)."""
        return (not on_cpu) if self.ordered is None else self.ordered

    async def start_all(self, start_one: Callable[[Any], Any]) -> None:
        """Start every member not running, in order (``start_one(member)`` is awaited)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            for member in self.members:
                if not member._alive():
                    await start_one(member)
