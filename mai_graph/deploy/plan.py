"""A memory plan for co-resident engines: will the lineup fit the card, and how to split it.

MAI runs two (or more) vLLM engines in one process, on one GPU. Each engine takes a share of
the card (``gpu_memory_utilization``) for its weights, its activation peak and its KV cache,
and vLLM refuses to start an engine whose share is not free when it starts (vLLM 0.32,
``vllm/v1/worker/utils.py::request_memory``: ``free >= total x share``). So the shares must sum
below what is free, and each engine's KV pool must hold at least one sequence of its
``max_model_len``. :func:`plan_memory` works this out from the models' local configs
(:mod:`mai_graph.deploy.shape`) and the workload of a MAI run, before any engine starts:

1. the context each model needs per run (:class:`Workload`): image tokens at the processor's
   pixel cap x images per question, the question, the CoT budget, the S2 turn, the transferred
   reasoning and the short answer, with 10% headroom -> ``max_model_len``;
2. per engine: weights (per device under tensor parallelism), estimated activation peak
   (vision encoder at the pixel cap, one batch of ``max_num_batched_tokens``, the sampler's
   logits), an allowance for CUDA graphs unless ``enforce_eager``, and a CUDA context outside
   the share (estimates: vLLM measures the real numbers when it profiles at start-up);
3. the free memory left after those is split into KV pools so that every engine holds the same
   number of concurrent runs; the shares follow.

Options the user set are kept and checked. A lineup that cannot fit is refused with a
:class:`PlanError` that gives the numbers and the fixes that would make it fit (each tried:
lower max pixels, fp8 KV cache, fp8 weights for the largest model, eager mode), plus a second
GPU or a remote model. On the CPU (vLLM's CPU build) the KV pool is ``kv_cache_gib`` per
engine and the plan checks that it holds ``max_model_len``.

What is measured and what is not: the KV bytes per token and the weight sizes are exact (the
tests check them against vLLM's own KV spec code and transformers); the activation, CUDA
graph and CUDA context allowances are estimates, not measured on a GPU by this project.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mai_graph import flow
from mai_graph.deploy.shape import ModelShape, read_shape
from mai_graph.deploy.spec import LineupSpec, ModelSpec
from mai_graph.errors import ConfigError, check_int, shown
from mai_graph.jsonin import MAX_BYTES, parse_gib
from mai_graph.workload import Workload

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "CUDA_GRAPH_BYTES",
    "Device",
    "EnginePlan",
    "MemoryPlan",
    "PlanError",
    "Workload",
    "parse_size",
    "plan_for_start",
    "plan_memory",
    "host_device",
    "probe_devices",
]

GiB = 1 << 30

CUDA_CONTEXT_BYTES = int(0.6 * GiB)
"""Per engine process, outside its share: the CUDA context and libraries' workspaces
(an estimate; vLLM's share excludes what the process held before it measured free memory)."""

CUDA_GRAPH_BYTES = int(0.5 * GiB)
"""Per engine inside its share, unless ``enforce_eager``: captured CUDA graphs (an estimate;
vLLM 0.32 measures its own)."""

MARGIN = 0.02
"""Share of each card left unplanned (fragmentation, other processes' small allocations)."""

MIN_MARGIN_BYTES = 1 * GiB
"""At least this much of each card is left unplanned: on a 16-24 GB card 2% is under half a
GiB, less than the allocator's fragmentation and the workspaces (cuBLAS, the sampler's
buffers) that are created after vLLM's profiling and so are not in its peak (an estimate)."""

UNSEEN_BYTES = GiB // 4
"""Per engine, outside its share: memory created lazily after vLLM profiled (an estimate)."""

DEFAULT_BATCHED_TOKENS = 2048
"""``max_num_batched_tokens`` of an in-process ``AsyncLLM`` when unset: vLLM 0.32 gives its
``ENGINE_CONTEXT`` no entry in ``EngineArgs.get_batch_defaults`` (only the ``LLM`` class and
the API server get the larger per-card defaults), so ``SchedulerConfig.
DEFAULT_MAX_NUM_BATCHED_TOKENS`` applies (``vllm/engine/arg_utils.py``,
``vllm/config/scheduler.py``). The plan writes it into the engine's options, so the engine
and the plan agree whatever the version."""

DEFAULT_MAX_SEQS = 128
"""``max_num_seqs`` of an in-process ``AsyncLLM`` when unset (``SchedulerConfig.
DEFAULT_MAX_NUM_SEQS``, as above); written into the engine's options by the plan."""

CPU_DEFAULT_MAX_MODEL_LEN = 4096
"""``VLLMBackend``'s default ``max_model_len`` (used as is on the CPU)."""

# At most 20 digits either side of the point: 1 PiB is 16 digits of bytes.
_SIZE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*(GiB|GB|MiB|MB|TiB|TB|G|M|T)?\s*$",
                   re.IGNORECASE)  # fmt: skip
_UNITS = {"gib": GiB, "gb": 10**9, "mib": 1 << 20, "mb": 10**6, "tib": 1 << 40, "tb": 10**12,
          "g": GiB, "m": 1 << 20, "t": 1 << 40, None: GiB}  # fmt: skip


class PlanError(ConfigError):
    """The lineup does not fit the device(s): the message has the numbers, ``fix`` the ways out."""


def parse_size(raw: str | int | float, parameter: str = "--gpu-memory") -> int:
    """Bytes of a size: ``80GiB``, ``24GB`` (10^9), ``16384MiB``; a bare number is GiB.

    >>> parse_size("80GiB") == 80 * 2**30, parse_size("24GB"), parse_size(1.5) == 1.5 * 2**30
    (True, 24000000000, True)
    """
    if isinstance(raw, bool):
        raise ConfigError(f"{parameter} must be a size, got {raw!r}", parameter=parameter)
    if isinstance(raw, int | float):
        number, unit = float(raw), None
    else:
        match = _SIZE.match(str(raw))
        if not match:
            raise ConfigError(
                f"{parameter} must be a size such as 80GiB or 24GB, got {shown(raw)}",
                parameter=parameter,
                value=raw,
                fix="give a number with GiB / GB / MiB (a bare number is GiB)",
            )
        number, unit = float(match.group(1)), match.group(2)
    scaled = number * _UNITS[unit.lower() if unit else None]
    size = int(scaled) if math.isfinite(scaled) and scaled <= MAX_BYTES else MAX_BYTES + 1
    if size <= 0 or size > MAX_BYTES:
        raise ConfigError(
            f"{parameter} must be a positive size below 1 PiB, got {raw!r}",
            parameter=parameter,
            value=raw,
        )
    return size


@dataclass(frozen=True)
class Device:
    """One accelerator (or the host for vLLM's CPU build)."""

    kind: str
    """``cuda`` or ``cpu``."""
    index: int
    total_bytes: int
    free_bytes: int
    name: str = ""
    source: str = "given"
    """``nvml`` / ``torch`` (probed when engines start), ``given`` (``--gpu-memory``)."""


def probe_devices() -> list[Device]:
    """The CUDA devices this process sees, with free memory (empty when there is none).

    Reads NVML (``nvidia-ml-py``, installed with vLLM), which does not initialize CUDA in this
    process; falls back to ``torch.cuda.mem_get_info`` where NVML is missing. Honours
    ``CUDA_VISIBLE_DEVICES`` (indices are the visible ones, as vLLM's ``device_ids``), and sets
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless the user chose an order (then warns).
    """
    import os

    # NVML numbers cards by PCI bus; CUDA does so only with this order (its default is fastest
    # first). Set before CUDA starts in this process, the plan's index i is vLLM's device i.
    order = os.environ.get("CUDA_DEVICE_ORDER")
    if not order:
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    elif order != "PCI_BUS_ID":
        import logging

        logging.getLogger(__name__).warning(
            "CUDA_DEVICE_ORDER=%s: the memory plan numbers cards in PCI bus order (NVML's), and "
            "CUDA numbers them otherwise; set CUDA_DEVICE_ORDER=PCI_BUS_ID",
            order,
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return []
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML library or no driver: try torch
        return _probe_torch()
    try:
        count = pynvml.nvmlDeviceGetCount()
        ids: list[Any] = list(range(count))
        if visible:
            ids = [int(v) if v.strip().isdigit() else v.strip() for v in visible.split(",")]
        devices = []
        for index, ident in enumerate(ids):
            if isinstance(ident, int):
                handle = pynvml.nvmlDeviceGetHandleByIndex(ident)
            else:
                handle = pynvml.nvmlDeviceGetHandleByUUID(ident)
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            devices.append(
                Device("cuda", index, int(info.total), int(info.free),
                       name.decode() if isinstance(name, bytes) else str(name), "nvml")
            )  # fmt: skip
        return devices
    except Exception:  # noqa: BLE001 - an NVML without devices
        return _probe_torch()
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def host_device() -> Device:
    """The host, as vLLM's CPU build sees it (RAM total and available)."""
    try:
        import psutil

        memory = psutil.virtual_memory()
        total, free = int(memory.total), int(memory.available)
    except Exception:  # noqa: BLE001 - no psutil: the plan still checks the KV pools
        total = free = 0
    return Device("cpu", 0, total, free, "host", "host")


def _probe_torch() -> list[Device]:
    import os
    import sys

    # No NVIDIA device nodes and torch not loaded: no GPU, and no reason to import torch.
    if "torch" not in sys.modules and not os.path.exists("/dev/nvidiactl"):
        return []
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    out = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        out.append(
            Device("cuda", index, int(total), int(free), torch.cuda.get_device_name(index), "torch")
        )
    return out


MEMORY_MODES = {
    "kv_bytes": "a fixed KV pool (kv_cache_memory_bytes); the share is vLLM's start check only",
    "share": "vLLM sizes the KV cache from the share minus its profiled peak (under vLLM 0.34 "
    "with the extensible KV cache on CUDA)",
    "kv_cache_gib": "vLLM's CPU build: a fixed KV pool of kv_cache_gib",
}
"""How an engine's KV cache is sized. The plan gives every engine it sizes a fixed pool:
vLLM then neither charges another engine's start to this one's profile nor turns 0.34's
extensible KV cache on (``vllm/config/vllm.py:_resolve_extensible_kv_cache``)."""


def profiled_images(image_tokens: int, batched: int, max_seqs: int, per_prompt: int) -> int:
    """Images vLLM 0.32 runs through the vision encoder at once when it profiles memory.

    ``vllm/multimodal/encoder_budget.py:_get_max_items``: the encoder budget (at least
    ``max_num_batched_tokens``, ``vllm/v1/core/encoder_cache_manager.py:
    compute_mm_encoder_budget``) over the tokens of one image at the pixel cap, at most
    ``max_num_seqs`` x images per prompt, at least one.

    >>> profiled_images(16386, 2048, 128, 5), profiled_images(258, 2048, 128, 5)
    (1, 7)
    """
    if image_tokens <= 0:
        return 0
    budget = max(batched, image_tokens)
    return max(1, min(budget // image_tokens, max_seqs * max(1, per_prompt)))


def user_kv_bytes(engine: Any) -> int | None:
    """The KV pool an engine's options fix in bytes, or None.

    ``kv_cache_memory_bytes`` (vLLM's) or ``kv_cache_gib`` (mai-graph's, in GiB).

    >>> user_kv_bytes({"kv_cache_gib": 1.5}), user_kv_bytes({})
    (1610612736, None)
    """
    if engine.get("kv_cache_memory_bytes") is not None:
        return int(engine["kv_cache_memory_bytes"])
    if engine.get("kv_cache_gib") is not None:
        return int(float(engine["kv_cache_gib"]) * GiB)
    return None


@dataclass
class EnginePlan:
    """One engine of the plan (byte figures are per device)."""

    label: str
    model: str
    devices: tuple[int, ...]
    parameters: int
    weights: int
    activation: int
    graphs: int
    outside: int
    """Memory the engine's process holds outside its share (CUDA context)."""
    kv_per_token: int
    run_tokens: int
    """Context one run holds in this engine."""
    image_tokens: int
    max_model_len: int
    kv_pool: int = 0
    gpu_memory_utilization: float | None = None
    concurrent_runs: int = 0
    kept: tuple[str, ...] = ()
    """Options the user set that the plan kept."""
    notes: list[str] = field(default_factory=list)
    batched_tokens: int = DEFAULT_BATCHED_TOKENS
    """``max_num_batched_tokens`` the engine runs with (the plan sets it when unset)."""
    max_seqs: int = DEFAULT_MAX_SEQS
    """``max_num_seqs`` the engine runs with (the plan sets it when unset)."""
    profiled_images: int = 1
    """Images vLLM's start-up profile runs through the vision encoder at once."""
    user_kv: int | None = None
    """A KV pool the user fixed (``kv_cache_gib`` / ``kv_cache_memory_bytes``), bytes."""
    memory_mode: str = "kv_bytes"
    """How vLLM sizes this engine's KV cache (see :data:`MEMORY_MODES`)."""

    @property
    def fixed(self) -> int:
        """Inside the share, before the KV pool."""
        return self.weights + self.activation + self.graphs

    @property
    def min_kv(self) -> int:
        """The smallest KV pool vLLM starts with: one sequence of ``max_model_len``."""
        return self.kv_per_token * self.max_model_len


@dataclass
class MemoryPlan:
    """The plan of a lineup on its device(s); :attr:`fits` says whether it can start."""

    devices: list[Device]
    engines: list[EnginePlan]
    workload: Workload
    problems: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        """True when every engine can start and hold at least one run."""
        return not self.problems

    @property
    def concurrent_runs(self) -> int:
        """Runs the lineup's KV pools hold at once (the least over the engines)."""
        return min((e.concurrent_runs for e in self.engines), default=0)

    def apply(self, lineup: LineupSpec) -> LineupSpec:
        """``lineup`` with the planned shares, KV pools and context lengths filled in.

        Only options the user left unset are filled (GPU plans; a CPU plan changes nothing):
        ``gpu_memory_utilization``, ``max_model_len``, ``max_num_batched_tokens`` and
        ``max_num_seqs`` (what the plan assumed), and ``kv_cache_memory_bytes`` for each engine
        whose share the plan chose (memory mode ``kv_bytes``, :data:`MEMORY_MODES`).
        """
        if not self.fits:
            raise self.error()
        if self.devices and self.devices[0].kind == "cpu":
            return lineup
        by_label = {e.label: e for e in self.engines}
        for label, _, spec in lineup.members():
            plan = by_label.get(label)
            if plan is None:
                continue
            update: dict[str, Any] = {}
            if "gpu_memory_utilization" not in spec.engine:
                update["gpu_memory_utilization"] = plan.gpu_memory_utilization
            if "max_model_len" not in spec.engine:
                update["max_model_len"] = plan.max_model_len
            # What the plan assumed is what the engine runs with (not the version's default).
            if spec.engine.get("max_num_batched_tokens") is None:
                update["max_num_batched_tokens"] = plan.batched_tokens
            if spec.engine.get("max_num_seqs") is None:
                update["max_num_seqs"] = plan.max_seqs
            if plan.memory_mode == "kv_bytes" and plan.user_kv is None:
                update["kv_cache_memory_bytes"] = plan.kv_pool
            if update:
                lineup = lineup.replace(label, spec.with_engine(**update))
        return lineup

    def error(self) -> PlanError:
        """The refusal: every problem with its numbers, and the fixes."""
        fixes = self.fixes or ["set each engine's gpu_memory_utilization and max_model_len"]
        return PlanError(
            "the lineup does not fit: " + "; ".join(self.problems),
            parameter="lineup",
            fix="; or ".join(fixes),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (``mai-graph plan --json``)."""
        return {
            "fits": self.fits,
            "devices": [asdict(d) for d in self.devices],
            "workload": self.workload.model_dump(),
            "engines": [
                {**{k: v for k, v in asdict(e).items() if k != "notes"}, "notes": list(e.notes)}
                for e in self.engines
            ],
            "concurrent_runs": self.concurrent_runs,
            "problems": list(self.problems),
            "fixes": list(self.fixes),
        }

    def table(self) -> str:
        """The plan as a text table (``mai-graph plan``)."""
        gib = lambda b: f"{b / GiB:.2f}"  # noqa: E731
        lines = []
        for d in self.devices:
            where = f"{d.kind}:{d.index}" + (f" {d.name}" if d.name else "")
            lines.append(
                f"device {where}: {gib(d.total_bytes)} GiB total, {gib(d.free_bytes)} GiB free "
                f"({d.source})"
            )
        w = self.workload
        image_tokens = self.engines[0].image_tokens if self.engines else 0
        lines.append(
            f"workload per run: {w.images} image(s) x {image_tokens}"
            f" tokens, question {w.question_tokens}, CoT {w.cot_tokens}, transfer "
            f"{w.transfer_tokens}, S2 {w.s2_tokens or w.short_tokens}, answer {w.short_tokens}"
        )
        cpu = bool(self.devices) and self.devices[0].kind == "cpu"
        share = "kv_cache" if cpu else "share"
        header = (
            f"{'engine':<10} {'model':<34} {'dev':>4} {'weights':>8} {'activ.':>7} "
            f"{'KV pool':>8} {'KV/token':>9} {'run ctx':>8} {'max_len':>8} {share:>8} {'runs':>5}"
            f" {'mode':<12}"
        )
        lines += ["", header, "-" * len(header)]
        for e in self.engines:
            model = e.model if len(e.model) <= 34 else "..." + e.model[-31:]
            value = "-" if e.gpu_memory_utilization is None else f"{e.gpu_memory_utilization:.3f}"
            if cpu:
                value = f"{e.kv_pool / GiB:.0f}GiB"
            lines.append(
                f"{e.label:<10} {model:<34} {','.join(map(str, e.devices)) or '-':>4} "
                f"{gib(e.weights):>8} {gib(e.activation + e.graphs):>7} {gib(e.kv_pool):>8} "
                f"{e.kv_per_token / 1024:>7.1f}Ki {e.run_tokens:>8,} {e.max_model_len:>8,} "
                f"{value:>8} {e.concurrent_runs:>5} {e.memory_mode:<12}"
            )
        lines.append("(GiB per device; activation = estimated peak + CUDA graphs; runs = "
                     "concurrent MAI runs its KV pool holds)")  # fmt: skip
        for mode in dict.fromkeys(e.memory_mode for e in self.engines):
            lines.append(f"mode {mode}: {MEMORY_MODES[mode]}")
        for d in self.devices:
            if d.kind != "cuda":
                continue
            on = [e for e in self.engines if d.index in e.devices]
            used = sum((e.gpu_memory_utilization or 0) * d.total_bytes + e.outside for e in on)
            lines.append(
                f"cuda:{d.index}: shares {sum(e.gpu_memory_utilization or 0 for e in on):.3f} "
                f"of {gib(d.total_bytes)} GiB + {gib(sum(e.outside for e in on))} GiB CUDA "
                f"contexts = {gib(used)} GiB of {gib(d.free_bytes)} GiB free"
            )
        for e in self.engines:
            for note in e.notes:
                lines.append(f"note: {e.label}: {note}")
        lines.append("")
        if self.fits:
            lines.append(f"fits: yes; the lineup holds {self.concurrent_runs} concurrent runs")
        else:
            lines.append("fits: NO")
            lines += [f"  - {p}" for p in self.problems]
            if self.fixes:
                lines.append("fixes that make it fit:")
                lines += [f"  - {f}" for f in self.fixes]
        return "\n".join(lines)


def margin_bytes(total: int) -> int:
    """What the plan leaves unplanned on a card of ``total`` bytes.

    >>> round(margin_bytes(80 * GiB) / GiB, 2), margin_bytes(16 * GiB) / GiB
    (1.6, 1.0)
    """
    return max(int(MARGIN * total), MIN_MARGIN_BYTES)


def _round_len(tokens: int, cap: int) -> int:
    return min(cap, max(256, math.ceil(tokens * 1.1 / 256) * 256))


# Engine options the plan counts with, and their least sensible value. vLLM checks them too,
# but only when its engine starts: a plan (a dry run, perhaps on a machine without vLLM) must
# not read 0 as "unset" or count with a size no engine could run.
_COUNTED = {"tensor_parallel_size": 1, "max_num_seqs": 1, "max_num_batched_tokens": 1,
            "max_model_len": 1, "kv_cache_memory_bytes": 1}  # fmt: skip
_MAX_COUNT = 1 << 40


def _check_counted(engine: dict[str, Any], where: str) -> None:
    """Refuse an engine option the plan counts with that is not a sensible whole number."""
    for key, least in _COUNTED.items():
        if engine.get(key) is not None:
            check_int(engine[key], key, minimum=least, maximum=_MAX_COUNT, where=where,
                      fix=f"give {key} as a whole number, or leave it to the plan")  # fmt: skip
    ids = engine.get("device_ids")
    if ids is not None:
        ok = isinstance(ids, list | tuple) and bool(ids) and len(set(map(str, ids))) == len(ids)
        if not ok or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1024 for i in ids
        ):
            raise ConfigError(
                f"{where}: device_ids must be a list of distinct card indices, got {ids!r}",
                parameter="device_ids",
                value=ids,
                fix="e.g. device_ids=[0] (or leave it out: the first tensor_parallel_size cards)",
            )
        tp = engine.get("tensor_parallel_size") or 1
        if len(ids) != tp:
            raise ConfigError(
                f"{where}: device_ids names {len(ids)} card(s) for tensor_parallel_size={tp}",
                parameter="device_ids",
                value=ids,
                fix="name one card per tensor-parallel rank",
            )


def _engine_plan(
    label: str,
    spec: ModelSpec,
    shape: ModelShape,
    workload: Workload,
    role: str,
    on_cpu: bool,
) -> EnginePlan:
    o = spec.engine
    where = f"{label} ({spec.name or spec.model})"
    _check_counted(o, where)
    tp = int(o.get("tensor_parallel_size") or 1)
    ids = o.get("device_ids")
    devices = tuple(int(i) for i in ids) if ids else tuple(range(tp))
    dtype = o.get("dtype")
    quant = o.get("quantization")
    mm = o.get("mm_processor_kwargs") or {}
    max_pixels = workload.max_pixels or mm.get("max_pixels")
    if max_pixels is None and isinstance(mm.get("size"), dict):
        max_pixels = mm["size"].get("longest_edge")
    if max_pixels is not None and shape.is_vision:
        unit = (shape.patch_size * shape.merge_size) ** 2
        given = "--max-pixels" if workload.max_pixels else "mm_processor_kwargs.max_pixels"
        side = shape.patch_size * shape.merge_size
        check_int(max_pixels, given, minimum=unit, maximum=_MAX_COUNT, where=where,
                  fix=f"give at least {unit} pixels ({side}x{side}: one image token of this "
                  "model)")  # fmt: skip
    image_tokens = shape.image_tokens(int(max_pixels) if max_pixels else None)
    # A reasoner holds the small side's longest call (its S2 turn); a reader the large side's
    # (the transfer it reads, or its own reasoning as large_cot or a chain's middle stage).
    run = workload.for_model(image_tokens).context_tokens(
        "small" if role == "reasoner" else "large"
    )
    kept = tuple(
        k
        for k in ("gpu_memory_utilization", "max_model_len", "kv_cache_gib",
                  "kv_cache_memory_bytes", "max_num_batched_tokens", "max_num_seqs")
        if o.get(k) is not None
    )  # fmt: skip
    cap = shape.max_position_embeddings
    if "max_model_len" in o:
        max_len = int(o["max_model_len"])
    elif on_cpu:
        max_len = CPU_DEFAULT_MAX_MODEL_LEN
    else:
        max_len = _round_len(run, cap)
    batched = int(o.get("max_num_batched_tokens") or DEFAULT_BATCHED_TOKENS)
    seqs = int(o.get("max_num_seqs") or DEFAULT_MAX_SEQS)
    weights = math.ceil(shape.weights(dtype, quant) / tp)
    px = int(max_pixels) if max_pixels else None
    limits = o.get("limit_mm_per_prompt") or {}
    per_prompt = limits.get("image") if isinstance(limits, dict) else None
    if not isinstance(per_prompt, int):
        from mai_graph.inputs.limits import DEFAULT_MM_LIMITS

        per_prompt = int(DEFAULT_MM_LIMITS.get("image", 1))
    images = profiled_images(image_tokens, batched, seqs, per_prompt) if shape.is_vision else 0
    activation = images * shape.vision_peak_bytes(px, dtype) + shape.text_peak_bytes(
        min(batched, max_len), seqs, dtype
    )
    eager = o.get("enforce_eager")
    graphs = 0 if on_cpu or eager else CUDA_GRAPH_BYTES
    plan = EnginePlan(
        label=label,
        model=spec.name or spec.model,
        devices=() if on_cpu else devices,
        parameters=shape.parameters,
        weights=weights,
        activation=0 if on_cpu else activation,
        graphs=graphs,
        outside=0 if on_cpu else CUDA_CONTEXT_BYTES + UNSEEN_BYTES,
        kv_per_token=shape.kv_bytes_per_token(o.get("kv_cache_dtype"), tp),
        run_tokens=run,
        image_tokens=image_tokens,
        max_model_len=max_len,
        kept=kept,
        batched_tokens=batched,
        max_seqs=seqs,
        profiled_images=images,
        user_kv=user_kv_bytes(o),
        memory_mode="kv_cache_gib" if on_cpu else "kv_bytes",
    )
    if not on_cpu and "gpu_memory_utilization" in o and plan.user_kv is None:
        plan.memory_mode = "share"
    if shape.weight_source == "config":
        plan.notes.append("weights counted from config.json (no safetensors files here)")
    return plan


def _roles(lineup: LineupSpec) -> dict[str, str]:
    """Each model's :func:`mai_graph.flow.memory_role`: ``reasoner`` or ``reader``.

    Drafters and the small model reason; the chain's models read a transfer, and every one
    but the last also reasons as the next stage's small model.
    """
    small = [label for label, side, _ in lineup.members() if side == "small"]
    large = [label for label, side, _ in lineup.members() if side == "large"]
    layout = flow.Layout(max(1, len(small)), max(1, len(large)))
    roles: dict[str, str] = {label: flow.memory_role(flow.Member("drafter", i), layout)
             for i, label in enumerate(small)}  # fmt: skip
    roles.update({label: flow.memory_role(flow.Member("chain", i), layout)
                  for i, label in enumerate(large)})  # fmt: skip
    return roles


def _in_process(lineup: LineupSpec) -> list[tuple[str, ModelSpec]]:
    return [
        (label, spec) for label, _, spec in lineup.members() if spec.kind(lineup.backend) == "vllm"
    ]


def plan_memory(
    lineup: LineupSpec,
    devices: Sequence[Device],
    workload: Workload | None = None,
    *,
    shapes: dict[str, ModelShape] | None = None,
    suggest: bool = True,
    fetch: bool = False,
) -> MemoryPlan:
    """The memory plan of ``lineup``'s in-process vLLM engines on ``devices``.

    Args:
        lineup: The lineup (its models' engine options are read; other kinds are skipped).
        devices: The CUDA devices (index = vLLM's ``device_ids``), or one ``cpu`` device.
        workload: What a run asks (default: default settings, one image).
        shapes: Model shapes by model path (default: read from the local configs).
        suggest: On a refusal, try the fixes and list those that make it fit.
        fetch: Fetch the config files of hub ids not cached here (engines about to start).

    Raises:
        ConfigError: A model's config is not on this machine or cannot be read.
    """
    workload = workload or Workload.from_context()
    shapes = dict(shapes or {})
    members = _in_process(lineup)
    roles = _roles(lineup)
    on_cpu = bool(devices) and devices[0].kind == "cpu"
    engines = []
    for label, spec in members:
        if spec.model not in shapes:
            shapes[spec.model] = read_shape(spec.model, fetch=fetch)
        engines.append(_engine_plan(label, spec, shapes[spec.model], workload, roles[label],
                                    on_cpu))  # fmt: skip
    plan = MemoryPlan(list(devices), engines, workload)
    if not engines:
        return plan
    if not devices:
        plan.problems.append("no device to plan for")
        return plan
    for e, (_, spec) in zip(engines, members):
        _check_context(plan, e, shapes[spec.model])
    if on_cpu:
        _plan_cpu(plan, members)
    else:
        _plan_gpu(plan, members)
    if not plan.fits and suggest:
        plan.fixes = _fixes(lineup, devices, workload, shapes, plan)
    return plan


def _check_context(plan: MemoryPlan, e: EnginePlan, shape: ModelShape) -> None:
    if e.run_tokens > shape.max_position_embeddings:
        plan.problems.append(
            f"{e.label} ({e.model}) needs {e.run_tokens:,} tokens per run, beyond the model's "
            f"{shape.max_position_embeddings:,}-token context"
        )
    elif e.max_model_len < e.run_tokens:
        plan.problems.append(
            f"{e.label} ({e.model}): max_model_len={e.max_model_len:,} is below the "
            f"{e.run_tokens:,} tokens a run needs ({e.image_tokens:,} per image)"
        )


def _plan_cpu(plan: MemoryPlan, members: list[tuple[str, ModelSpec]]) -> None:
    host = plan.devices[0]
    import os

    env = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    default = parse_gib(env, parameter="VLLM_CPU_KVCACHE_SPACE", default=1.0)
    for e in plan.engines:  # as VLLMBackend.kv_cache_bytes asks vLLM for it
        e.kv_pool = e.user_kv if e.user_kv is not None else int(default * GiB)
        if e.kv_pool < e.min_kv:
            plan.problems.append(
                f"{e.label} ({e.model}): a KV cache of {e.kv_pool / GiB:.0f} GiB holds "
                f"{e.kv_pool // e.kv_per_token:,} tokens, less than max_model_len="
                f"{e.max_model_len:,}"
            )
        e.concurrent_runs = e.kv_pool // max(1, e.kv_per_token * e.run_tokens)
    need = sum(e.weights + e.kv_pool for e in plan.engines)
    if host.free_bytes and need > host.free_bytes:
        plan.problems.append(
            f"the engines' weights and KV caches take {need / GiB:.2f} GiB of RAM, but only "
            f"{host.free_bytes / GiB:.2f} GiB is available"
        )


def _plan_gpu(plan: MemoryPlan, members: list[tuple[str, ModelSpec]]) -> None:
    by_index = {d.index: d for d in plan.devices}
    for e in plan.engines:
        missing = [i for i in e.devices if i not in by_index]
        if missing:
            plan.problems.append(
                f"{e.label} ({e.model}) is placed on device(s) {missing}, but only "
                f"{sorted(by_index)} are there"
            )
    if not plan.fits:
        return
    # Each engine's share is one fraction of every card it spans; plan on the tightest card.
    for d in plan.devices:
        on = [e for e in plan.engines if d.index in e.devices]
        if not on:
            continue
        total = d.total_bytes
        budget = d.free_bytes - sum(e.outside for e in on) - margin_bytes(total)
        fixed_user = [e for e in on if "gpu_memory_utilization" in e.kept]
        user_bytes = 0
        for e in on:  # a KV pool the user fixed, without a share: the share covers it
            if e in fixed_user or e.user_kv is None:
                continue
            share = math.ceil((e.fixed + e.user_kv) / total * 1000) / 1000
            if e.gpu_memory_utilization is not None:  # spans several cards: the largest wins
                share = max(share, e.gpu_memory_utilization)
            e.gpu_memory_utilization = min(1.0, share)
            e.kv_pool = e.user_kv
            if e.kv_pool < e.min_kv:
                plan.problems.append(
                    f"{e.label} ({e.model}): its KV pool ({e.kv_pool / GiB:.2f} GiB) holds less "
                    f"than one {e.max_model_len:,}-token sequence ({e.min_kv / GiB:.2f} GiB)"
                )
        sized = [e for e in on if e not in fixed_user and e.user_kv is not None]
        user_bytes += sum(int((e.gpu_memory_utilization or 0) * total) for e in sized)
        auto = [e for e in on if e not in fixed_user and e not in sized]
        for e, (_, spec) in zip(plan.engines, members):
            if e not in fixed_user:
                continue
            share = float(spec.engine["gpu_memory_utilization"])
            e.gpu_memory_utilization = share
            e.kv_pool = int(share * total) - e.fixed if e.user_kv is None else e.user_kv
            user_bytes += int(share * total)
            if e.user_kv is not None and e.fixed + e.user_kv > share * total:
                plan.problems.append(
                    f"{e.label} ({e.model}): gpu_memory_utilization={share} gives "
                    f"{share * total / GiB:.2f} GiB on cuda:{d.index}, less than its weights, "
                    f"activations and fixed KV pool ({(e.fixed + e.user_kv) / GiB:.2f} GiB)"
                )
            if e.kv_pool < e.min_kv:
                plan.problems.append(
                    f"{e.label} ({e.model}): gpu_memory_utilization={share} gives "
                    f"{share * total / GiB:.2f} GiB on cuda:{d.index}, but weights "
                    f"{e.weights / GiB:.2f} + activations {(e.activation + e.graphs) / GiB:.2f}"
                    f" + one {e.max_model_len:,}-token sequence {e.min_kv / GiB:.2f} GiB need "
                    f"{(e.fixed + e.min_kv) / GiB:.2f} GiB"
                )
        need = sum(e.fixed + e.min_kv for e in auto)
        left = budget - user_bytes - need
        if left < 0:
            parts = ", ".join(
                f"{e.label} {e.weights / GiB:.2f} weights + {(e.activation + e.graphs) / GiB:.2f}"
                f" activations + {e.min_kv / GiB:.2f} KV"
                for e in auto
            )
            weights = sum(e.weights for e in on)
            if weights > budget:
                plan.problems.append(
                    f"the weights alone ({weights / GiB:.2f} GiB) exceed what cuda:{d.index} "
                    f"can give the engines ({max(0, budget) / GiB:.2f} GiB)"
                )
            plan.problems.append(
                f"cuda:{d.index} has {d.free_bytes / GiB:.2f} GiB free; the engines need "
                f"{(need + user_bytes + sum(e.outside for e in on)) / GiB:.2f} GiB ({parts}"
                f"{', user shares ' + format(user_bytes / GiB, '.2f') if user_bytes else ''}, "
                f"{sum(e.outside for e in on) / GiB:.2f} CUDA contexts and unprofiled "
                f"workspaces) with {margin_bytes(total) / GiB:.2f} GiB kept free"
            )
            continue
        weight = sum(e.kv_per_token * e.run_tokens for e in auto) or 1
        for e in auto:
            kv = e.min_kv + int(left * e.kv_per_token * e.run_tokens / weight)
            share = math.floor((e.fixed + kv) / total * 1000) / 1000
            if e.gpu_memory_utilization is not None:  # spans several cards: the tightest wins
                share = min(share, e.gpu_memory_utilization)
            e.gpu_memory_utilization = share
            e.kv_pool = int(share * total) - e.fixed
    for e in plan.engines:
        e.concurrent_runs = max(0, e.kv_pool) // max(1, e.kv_per_token * e.run_tokens)
        if plan.fits and e.kv_pool < e.min_kv:
            plan.problems.append(
                f"{e.label} ({e.model}): its KV pool ({e.kv_pool / GiB:.2f} GiB) holds less than "
                f"one {e.max_model_len:,}-token sequence ({e.min_kv / GiB:.2f} GiB)"
            )


def _fixes(
    lineup: LineupSpec,
    devices: Sequence[Device],
    workload: Workload,
    shapes: dict[str, ModelShape],
    failed: MemoryPlan,
) -> list[str]:
    """Changes that make the plan fit, each tried; then the ones that always work."""
    members = _in_process(lineup)
    out: list[str] = []
    fp8_weights = online_fp8_method()

    def fits(candidate: LineupSpec, work: Workload = workload) -> MemoryPlan | None:
        try:
            plan = plan_memory(candidate, devices, work, shapes=shapes, suggest=False)
        except ConfigError:
            return None
        return plan if plan.fits else None

    def with_all(**options: Any) -> LineupSpec:
        out_lineup = lineup
        for label, spec in members:
            keep = {k: v for k, v in options.items() if k not in spec.engine}
            out_lineup = out_lineup.replace(label, spec.with_engine(**keep))
        return out_lineup

    image_tokens = max((e.image_tokens for e in failed.engines), default=0)
    unit = 1024  # Qwen3-VL: one token per 32 x 32 pixels
    for shape in shapes.values():
        if shape.is_vision:
            unit = (shape.patch_size * shape.merge_size) ** 2
            break
    tried: list[tuple[str, LineupSpec, Workload]] = []
    for pixels in (1024 * unit, 256 * unit):
        if image_tokens - 2 > pixels // unit:
            tried.append((
                f"cap images at {pixels:,} pixels ({pixels // unit + 2:,} tokens each): "
                f'mm_processor_kwargs={{"max_pixels": {pixels}}} for every model',
                with_all(mm_processor_kwargs={"max_pixels": pixels}),
                workload.model_copy(update={"max_pixels": pixels}),
            ))  # fmt: skip
    if workload.cot_tokens > 256:
        tried.append(
            (
                f"a shorter CoT budget: cot_max_tokens={workload.cot_tokens // 2}",
                lineup,
                workload.model_copy(
                    update={
                        "cot_tokens": workload.cot_tokens // 2,
                        "large_cot_tokens": workload.cot_tokens // 2,
                    }
                ),
            )
        )
    tried.append(
        (
            "an fp8 KV cache: kv_cache_dtype=fp8 for every model",
            with_all(kv_cache_dtype="fp8"),
            workload,
        )
    )
    if members:
        big_label, big = max(members, key=lambda m: shapes[m[1].model].parameters)
        if "quantization" not in big.engine:
            tried.append(
                (
                    f"fp8 weights for the {big_label} model: quantization={fp8_weights}",
                    lineup.replace(big_label, big.with_engine(quantization=fp8_weights)),
                    workload,
                )
            )
            combo = with_all(kv_cache_dtype="fp8", mm_processor_kwargs={"max_pixels": 1024 * unit})
            for label, _, spec in combo.members():
                if label == big_label:
                    combo = combo.replace(label, spec.with_engine(quantization=fp8_weights))
            tried.append((
                f"all three: fp8 weights for the {big_label} model (quantization={fp8_weights}), "
                f"an fp8 KV cache (kv_cache_dtype=fp8), images capped at {1024 * unit:,} pixels",
                combo, workload.model_copy(update={"max_pixels": 1024 * unit}),
            ))  # fmt: skip
    tried.append(
        (
            "eager mode (no CUDA graphs): enforce_eager=true for every model",
            with_all(enforce_eager=True),
            workload,
        )
    )
    for text, candidate, work in tried:
        plan = fits(candidate, work)
        if plan is not None:
            out.append(f"{text} (then {plan.concurrent_runs} concurrent runs)")
    placed = {i for e in failed.engines for i in e.devices}
    if len(placed) <= 1:
        out.append("put the large model on a second GPU: device_ids=[1] for it")
    out.append("run the large model remotely: backend=openai with its vllm serve URL")
    return out


def online_fp8_method() -> str:
    """The name the installed vLLM gives online fp8 weight quantization of a bf16 checkpoint.

    vLLM 0.32 deprecates ``quantization=fp8`` for that (mapped to ``fp8_per_tensor``); older
    versions know only ``fp8``. Without vLLM here: the 0.32 name.
    """
    try:
        from mai_graph.backends.vllm import compat

        methods = compat.quantization_methods()
    except Exception:  # noqa: BLE001 - no vLLM on this machine (a dry run): today's name
        return "fp8_per_tensor"
    return "fp8_per_tensor" if "fp8_per_tensor" in methods else "fp8"


def capped_devices(devices: Sequence[Device], gpu_memory: str | None) -> list[Device]:
    """``devices`` with at most ``gpu_memory`` free each (``--gpu-memory``); as is for None.

    Raises:
        ConfigError: ``gpu_memory`` is not a size, or there is no GPU to cap.
    """
    if gpu_memory is None:
        return list(devices)
    size = parse_size(gpu_memory)
    if not devices:
        raise ConfigError(
            "--gpu-memory / MAI_GRAPH_GPU_MEMORY caps what the engines plan on a GPU, "
            "and this machine has none",
            parameter="--gpu-memory",
            value=gpu_memory,
            fix="drop it here, or dry-run a card with `mai-graph plan --gpu-memory SIZE`",
        )
    # Shares are of the card's total (as vLLM takes them); only the free part shrinks.
    return [replace(d, free_bytes=min(d.free_bytes, size)) for d in devices]


def plan_for_start(
    lineup: LineupSpec,
    *,
    context: Any = None,
    gpu_memory: str | None = None,
    devices: Sequence[Device] | None = None,
) -> LineupSpec:
    """The lineup an engine should start with: planned on a GPU, checked on the CPU.

    With in-process vLLM models and a GPU (``devices``, else :func:`probe_devices`, each with at
    most ``gpu_memory`` free), the plan fills each engine's unset ``gpu_memory_utilization`` and
    ``max_model_len``, and a lineup that cannot fit raises :class:`PlanError`. A model whose
    config is not on this machine is refused only when the plan would have to choose its share;
    with every share given, the plan is skipped. A hub id whose config is not cached has its
    config files fetched first (the engine would download the checkpoint anyway; never the
    weights here). Without a GPU (vLLM's CPU build), the plan
    checks what it can read locally and changes nothing.
    """
    members = _in_process(lineup)
    if not members:
        return lineup
    if devices is None:
        devices = capped_devices(probe_devices(), gpu_memory)
    workload = Workload.from_context(context)
    if not devices:  # vLLM's CPU build (or no GPU at all): check what can be read here
        from mai_graph.deploy.shape import find_model_dir

        # Checkpoints on this machine only (a shipped config plans GPUs, not this CPU run).
        if any(find_model_dir(spec.model, bundled=False) is None for _, spec in members):
            return lineup
        plan = plan_memory(lineup, [host_device()], workload)
        if not plan.fits:
            raise plan.error()
        return lineup
    if all("gpu_memory_utilization" in spec.engine for _, spec in members):
        from mai_graph.deploy.shape import find_model_dir

        if any(find_model_dir(spec.model) is None for _, spec in members):
            return lineup  # nothing to choose, nothing to read: vLLM checks at start
    # The engines will download their checkpoints anyway: fetch the configs of hub ids first.
    plan = plan_memory(lineup, devices, workload, fetch=True)
    return plan.apply(lineup)
