"""What a GPU start of in-process vLLM engines relies on, on a simulated card.

vLLM's CPU build forces spawn, is handed its KV pool and never shares a card, so these paths
never run here for real. Each test replaces vLLM's platform check (GPU), the device probe (an
80 GB card) and ``AsyncLLM.from_engine_args`` (a recorder: no engine starts), then goes
through the public doors. What vLLM does on a GPU is read from its source (cited in
``mai_graph/backends/vllm/startup.py``), not measured here.
"""

import asyncio
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

pytest.importorskip("vllm", reason="vLLM is installed by scripts/install-cpu.sh")

from mai_graph import ConfigError  # noqa: E402
from mai_graph.backends.vllm import VLLMBackend, startup  # noqa: E402
from mai_graph.backends.vllm import backend as vllm_backend  # noqa: E402
from mai_graph.backends.vllm import engine as vllm_engine  # noqa: E402
from mai_graph.deploy import Device, plan_for_start, plan_memory  # noqa: E402
from mai_graph.deploy import plan as plan_module  # noqa: E402
from mai_graph.deploy.select import backend_for, backends_for  # noqa: E402
from mai_graph.deploy.spec import LineupSpec, ModelSpec  # noqa: E402

GiB = 1 << 30
SMALL, LARGE = "Qwen/Qwen3-VL-2B-Instruct", "Qwen/Qwen3-VL-8B-Instruct"


def card(gb=80, free=None):
    total = gb * 10**9
    return [Device("cuda", 0, total, total if free is None else free, "sim", "given")]


class Recorder:
    """Stands in for ``AsyncLLM.from_engine_args``: records each start, starts nothing."""

    def __init__(self):
        self.starts = []

    def __call__(self, args):
        self.starts.append(
            SimpleNamespace(
                model=args.model,
                args=args,
                method=os.environ.get("VLLM_WORKER_MULTIPROC_METHOD"),
                order=os.environ.get("CUDA_DEVICE_ORDER"),
                kv_env=os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
                at=time.monotonic(),
            )
        )
        return SimpleNamespace(errored=False, model_config=SimpleNamespace(model=args.model))


@pytest.fixture
def gpu(monkeypatch):
    """A simulated 80 GB card: GPU platform, probed device, recorded engine starts."""
    from vllm.v1.engine import async_llm

    recorder = Recorder()
    monkeypatch.setattr(vllm_engine, "_on_cpu", lambda: False)
    monkeypatch.setattr(plan_module, "probe_devices", lambda: card())
    monkeypatch.setattr(async_llm.AsyncLLM, "from_engine_args", recorder)
    monkeypatch.setattr(VLLMBackend, "_bind_translator", lambda self: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("VLLM_WORKER_MULTIPROC_METHOD", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    yield recorder
    for b in list(startup._running):
        startup.forget(b)


def start(*backends):
    async def go():
        for b in backends:
            await b.start(warmup=False)

    asyncio.run(go())


def members(pair):
    out = []
    for side in pair:
        out += side if isinstance(side, list) else [side]
    return out


def shares(pair):
    return [b.engine_args().gpu_memory_utilization for b in members(pair)]


# -- every door plans (must have 1) -----------------------------------------------------------


def test_backends_for_hub_ids_plans_both_engines_offline(gpu):
    pair = backends_for("vllm", SMALL, LARGE)
    s = shares(pair)
    total = card()[0].total_bytes
    outside = 2 * (plan_module.CUDA_CONTEXT_BYTES + plan_module.UNSEEN_BYTES)
    assert all(0 < x < 0.9 for x in s), s
    assert sum(s) * total + outside <= total - plan_module.margin_bytes(total), s
    for b in members(pair):  # a fixed KV pool and the batch limits the plan assumed
        args = b.engine_args()
        assert args.kv_cache_memory_bytes > GiB
        assert (args.max_num_batched_tokens, args.max_num_seqs) == (2048, 128)
        assert args.block_size == vllm_backend.GPU_BLOCK_SIZE


@pytest.mark.parametrize("door", ["trained", "tiny", "lineup"])
def test_every_helper_gives_each_engine_an_explicit_share_that_leaves_room(gpu, door, tmp_path):
    if door == "trained":
        from mai_graph.pair import trained_backends

        pair = trained_backends("vllm")
    elif door == "tiny":
        from mai_graph.tiny.build import tiny_backends

        pair = tiny_backends("vllm", tmp_path)
    else:
        from mai_graph.deploy.select import lineup_for

        pair = lineup_for("vllm", SMALL, LARGE, drafters=["Qwen/Qwen3-VL-4B-Instruct"])
    total = card()[0].total_bytes
    s = shares(pair)
    assert all(x is not None and 0 < x < 0.9 for x in s), s
    outside = len(s) * (plan_module.CUDA_CONTEXT_BYTES + plan_module.UNSEEN_BYTES)
    assert sum(s) * total + outside <= total, s


def test_backend_for_plans_one_engine_and_a_second_cannot_start_beside_it(gpu):
    one = backend_for("vllm", SMALL)
    assert one.engine_args().gpu_memory_utilization > 0.5
    other = backend_for("vllm", LARGE)
    start(one)
    with pytest.raises(Exception, match="second vLLM engine would start on a GPU"):
        start(other)
    assert len(gpu.starts) == 1


def test_engines_built_one_by_one_need_a_share_each(gpu):
    a, b = VLLMBackend(SMALL, name="a"), VLLMBackend(LARGE, name="b")
    start(a)
    assert gpu.starts[0].args.gpu_memory_utilization == startup.SOLE_ENGINE_SHARE
    with pytest.raises(Exception, match="without a share") as err:
        start(b)
    assert "build_lineup" in str(err.value.__cause__.fix)
    c, d = (VLLMBackend(m, gpu_memory_utilization=0.3) for m in (SMALL, LARGE))
    startup.forget(a.handle)
    start(c, d)
    assert [s.args.gpu_memory_utilization for s in gpu.starts[1:]] == [0.3, 0.3]


# -- GPU-only paths, safe by construction (must have 2) --------------------------------------


def test_engines_are_spawned_and_devices_numbered_as_nvml_does(gpu):
    start(VLLMBackend(SMALL, gpu_memory_utilization=0.3))
    assert gpu.starts[0].method == "spawn"
    assert gpu.starts[0].order == "PCI_BUS_ID"


def test_a_users_start_method_is_kept(gpu, monkeypatch):
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "forkserver")
    start(VLLMBackend(SMALL, gpu_memory_utilization=0.3))
    assert gpu.starts[0].method == "forkserver"


def test_a_lineup_starts_every_engine_in_order_before_the_first_request(gpu):
    small, large = backends_for("vllm", SMALL, LARGE)
    start(large)  # the first use of either starts both, small first
    assert [s.model for s in gpu.starts] == [SMALL, LARGE]
    assert small.started and large.started


def test_a_lineup_on_the_cpu_keeps_starting_on_first_use(gpu, monkeypatch):
    monkeypatch.setattr(vllm_engine, "_on_cpu", lambda: True)
    small, large = backends_for("vllm", SMALL, LARGE)
    start(large)
    assert [s.model for s in gpu.starts] == [LARGE] and not small.started


def test_kv_cache_gib_is_kv_cache_memory_bytes_on_both_platforms(gpu, monkeypatch):
    start(VLLMBackend(SMALL, gpu_memory_utilization=0.3, kv_cache_gib=2))
    assert gpu.starts[-1].args.kv_cache_memory_bytes == 2 * GiB
    monkeypatch.setattr(vllm_engine, "_on_cpu", lambda: True)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "5")
    start(VLLMBackend(SMALL, kv_cache_gib=1.5))
    last = gpu.starts[-1]
    assert last.args.kv_cache_memory_bytes == int(1.5 * GiB)
    assert last.kv_env is None  # vLLM's CPU platform would let the variable override it
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "5"  # the user's setting is restored
    start(VLLMBackend(SMALL))  # without kv_cache_gib: the user's variable, as vLLM reads it
    assert gpu.starts[-1].args.kv_cache_memory_bytes == 5 * GiB


def test_two_cpu_engines_starting_at_once_keep_their_own_kv_pools(gpu, monkeypatch):
    monkeypatch.setattr(vllm_engine, "_on_cpu", lambda: True)
    engines = [VLLMBackend(SMALL, name=f"e{i}", kv_cache_gib=i + 1) for i in range(4)]

    async def go():
        await asyncio.gather(*(e.start(warmup=False) for e in engines))

    asyncio.run(go())
    got = sorted(s.args.kv_cache_memory_bytes for s in gpu.starts)
    assert got == [GiB * (i + 1) for i in range(4)]


def test_the_plan_keeps_a_share_that_passes_the_start_check_for_a_given_kv_pool(gpu):
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model=SMALL, engine={"kv_cache_gib": 20}),
                        large=ModelSpec(model=LARGE))  # fmt: skip
    plan = plan_memory(lineup, card())
    small = plan.engines[0]
    assert small.kv_pool == 20 * GiB and small.memory_mode == "kv_bytes"
    assert small.gpu_memory_utilization * card()[0].total_bytes >= small.fixed + 20 * GiB
    planned = plan.apply(lineup)
    assert "kv_cache_memory_bytes" not in planned.small.engine  # the user's kv_cache_gib stays
    assert planned.large.engine["kv_cache_memory_bytes"] == plan.engines[1].kv_pool


def test_skip_mm_profiling_is_refused_on_a_gpu_unless_the_kv_pool_is_fixed(gpu, monkeypatch):
    bare = VLLMBackend(SMALL, gpu_memory_utilization=0.3, skip_mm_profiling=True)
    with pytest.raises(ConfigError, match="skip_mm_profiling") as err:
        bare.engine_args()
    assert "kv_cache_gib" in err.value.fix
    fixed = VLLMBackend(SMALL, gpu_memory_utilization=0.3, skip_mm_profiling=True, kv_cache_gib=4)
    assert fixed.engine_args().skip_mm_profiling
    planned = backends_for("vllm", SMALL, LARGE, engines=({"skip_mm_profiling": True}, None))
    assert planned[0].engine_args().kv_cache_memory_bytes > 0  # the plan sized its pool
    monkeypatch.setattr(vllm_engine, "_on_cpu", lambda: True)
    assert bare.engine_args().skip_mm_profiling  # the CPU tests' setting


@pytest.mark.slow
def test_a_restart_waits_for_the_dead_engines_processes_and_memory(gpu, monkeypatch):
    backend = VLLMBackend(SMALL, gpu_memory_utilization=0.3)
    start(backend)
    dying = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    handle = backend.handle  # as if the engine had just died
    handle._dead_procs = [psutil.Process(dying.pid)]
    handle._engine, handle._death = None, "engine core exited during a test"
    handle._deaths.append(time.monotonic())
    probes = []

    def probe(index):
        probes.append(time.monotonic())
        free = 20 if len(probes) < 3 else 60  # GB: the dead engine's memory comes back
        return free * 10**9, 80 * 10**9

    monkeypatch.setattr(startup, "device_memory", probe)
    monkeypatch.setattr(startup, "POLL_S", 0.01)
    start(backend)
    assert dying.poll() is not None  # the new engine started after the old one had exited
    assert len(probes) == 3 and gpu.starts[-1].at >= probes[-1]
    assert backend.restarts == 1


def test_wait_for_memory_gives_up_after_its_timeout():
    calls = []

    def probe(index):
        calls.append(index)
        return 10, 100

    assert not startup.wait_for_memory([0], 0.5, 0.05, probe=probe, sleep=lambda s: None)
    assert startup.wait_for_memory([0], 0.05, 0.05, probe=probe, sleep=lambda s: None)
    assert startup.wait_for_memory([0], 0.5, 0.05, probe=lambda i: None, sleep=lambda s: None)


def test_the_plan_and_the_engine_agree_on_the_batch_limits():
    assert (plan_module.DEFAULT_BATCHED_TOKENS, plan_module.DEFAULT_MAX_SEQS) == (2048, 128)
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model=SMALL),
                        large=ModelSpec(model=LARGE, engine={"max_num_seqs": 64}))  # fmt: skip
    planned = plan_for_start(lineup, devices=card())
    assert planned.small.engine["max_num_batched_tokens"] == 2048
    assert planned.small.engine["max_num_seqs"] == 128
    assert planned.large.engine["max_num_seqs"] == 64  # the user's, kept


def test_fixes_use_the_installed_vllms_spelling():
    refused = plan_memory(
        LineupSpec(backend="vllm", small=ModelSpec(model=SMALL), large=ModelSpec(model=LARGE)),
        card(32),
    )
    text = " ".join(refused.fixes)
    assert "quantization=fp8_per_tensor" in text and "quantization=fp8 " not in text


def test_small_cards_keep_at_least_a_gib_free_and_each_engine_room_for_what_profiling_misses():
    assert plan_module.margin_bytes(16 * GiB) == GiB
    plan = plan_memory(
        LineupSpec(backend="vllm", small=ModelSpec(model=SMALL), large=ModelSpec(model=LARGE)),
        card(24),
    )
    if plan.fits:
        used = sum(e.gpu_memory_utilization * 24 * 10**9 + e.outside for e in plan.engines)
        assert used <= 24 * 10**9 - GiB


def test_the_vision_allowance_counts_the_images_vllm_profiles_at_once():
    capped = {"mm_processor_kwargs": {"max_pixels": 256 * 1024}}
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model=SMALL, engine=capped),
                        large=ModelSpec(model=LARGE))  # fmt: skip
    plan = plan_memory(lineup, card())
    small, large = plan.engines
    assert small.profiled_images == 7  # 2048 batched tokens / 258 tokens per image
    assert large.profiled_images == 1  # one image at the 16M-pixel cap exceeds the budget


def test_probing_devices_sets_cuda_to_nvml_order(monkeypatch):
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.setattr(plan_module, "_probe_torch", lambda: [])
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: import fails
    plan_module.probe_devices()
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_the_plan_table_names_each_engines_memory_mode():
    lineup = LineupSpec(
        backend="vllm",
        small=ModelSpec(model=SMALL, engine={"gpu_memory_utilization": 0.2}),
        large=ModelSpec(model=LARGE),
    )
    plan = plan_memory(lineup, card())
    assert [e.memory_mode for e in plan.engines] == ["share", "kv_bytes"]
    table = plan.table()
    assert "mode" in table and "kv_bytes" in table and "share" in table


def test_a_lineups_options_are_checked_once(gpu, monkeypatch):
    from mai_graph.deploy import spec as spec_module

    calls = []
    real = spec_module._check_vllm_options
    monkeypatch.setattr(spec_module, "_check_vllm_options",
                        lambda *a, **k: calls.append(a[1]) or real(*a, **k))  # fmt: skip
    backends_for("vllm", SMALL, LARGE, engines=({"max_model_len": 32768}, None))
    assert len(calls) == 2, calls  # one check per model, not one per layer
