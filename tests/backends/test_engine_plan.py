"""The memory plan on the real Qwen3-VL configs (mai_graph/deploy/configs/qwen3_vl).

KV bytes per token are checked against vLLM's own computation (its ModelConfig reads the same
config.json; its FullAttentionSpec prices a page), parameter counts against transformers
(the model built on the meta device), and every plan against its own invariants on 16, 24,
40, 80 and 141 GB cards. The fixes a refusal lists are each applied and re-planned.
"""

import json
from pathlib import Path

import pytest

from mai_graph import ConfigError, LineupSpec, ModelSpec, PlanError
from mai_graph.deploy import Device, Workload, parse_size, plan_for_start, plan_memory, read_shape

DATA = Path(__file__).parents[2] / "mai_graph" / "deploy" / "configs" / "qwen3_vl"
SIZES = ("2B", "4B", "8B", "32B")
CARDS = ("16GB", "24GB", "40GB", "80GB", "141GB")
PAIRS = (("2B", "8B"), ("4B", "8B"), ("2B", "4B"), ("8B", "32B"), ("2B", "32B"))


def card(size, n=1):
    b = parse_size(size)
    return [Device("cuda", i, b, b) for i in range(n)]


def pair(small, large, small_opts=None, large_opts=None):
    return LineupSpec(
        backend="vllm",
        small=ModelSpec(model=str(DATA / small), engine=small_opts or {}),
        large=ModelSpec(model=str(DATA / large), engine=large_opts or {}),
    )


@pytest.fixture(scope="module")
def vllm_config():
    pytest.importorskip("vllm")
    from vllm.config import ModelConfig, ParallelConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    tokenizer = str(Path(__file__).parents[2] / "mai_graph" / "pair" / "models" / "small")

    def kv_per_token(size, tp=1, kv_dtype=None):
        import torch

        config = ModelConfig(model=str(DATA / size), tokenizer=tokenizer, skip_tokenizer_init=True,
                             max_model_len=4096)  # fmt: skip
        parallel = ParallelConfig(tensor_parallel_size=tp)
        dtype = config.dtype if kv_dtype is None else torch.float8_e4m3fn
        spec = FullAttentionSpec(block_size=16, num_kv_heads=config.get_num_kv_heads(parallel),
                                 head_size=config.get_head_size(), dtype=dtype)  # fmt: skip
        return spec.page_size_bytes // 16 * config.get_num_layers(parallel)

    return kv_per_token


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_kv_bytes_per_token_match_vllm(vllm_config, size, tp):
    shape = read_shape(str(DATA / size))
    assert shape.kv_bytes_per_token(tensor_parallel=tp) == vllm_config(size, tp)


@pytest.mark.parametrize("size", SIZES)
def test_fp8_kv_is_half(vllm_config, size):
    shape = read_shape(str(DATA / size))
    assert shape.kv_bytes_per_token("fp8") == vllm_config(size, kv_dtype="fp8")
    assert shape.kv_bytes_per_token("fp8") * 2 == shape.kv_bytes_per_token()


@pytest.mark.parametrize("size", SIZES)
def test_parameter_counts_match_transformers(size):
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(DATA / size)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    shape = read_shape(str(DATA / size))
    assert shape.parameters == sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    assert shape.vision_parameters == vision


def test_published_sizes_and_image_tokens():
    # Qwen3-VL-8B: 36 layers x 8 KV heads x head 128 x 2 x bf16 = 147,456 bytes per token;
    # ~8.77 B parameters (17.5 GB in bf16); 2B + 8B weights ~21.8 GB.
    s2, s8 = read_shape(str(DATA / "2B")), read_shape(str(DATA / "8B"))
    assert s8.kv_bytes_per_token() == 147_456
    assert round((s2.weights() + s8.weights()) / 1e9, 1) == 21.8
    # The processor caps images at 16,777,216 pixels; a token per 32 x 32 pixels, + start/end.
    assert s8.image_tokens() == 16_384 + 2
    assert s8.image_tokens(1_048_576) == 1_024 + 2


def test_the_trained_pair_reads_its_weights_from_safetensors():
    from mai_graph.pair import trained_pair_paths

    small, _ = trained_pair_paths()
    shape = read_shape(str(small))
    assert shape.weight_source == "safetensors headers"
    assert shape.weights() == sum(f.stat().st_size for f in small.glob("*.safetensors")) - (
        _header_bytes(small)
    )


def _header_bytes(folder):
    import struct

    total = 0
    for f in folder.glob("*.safetensors"):
        with f.open("rb") as fh:
            total += 8 + struct.unpack("<Q", fh.read(8))[0]
    return total


def check_invariants(plan, devices):
    for e in plan.engines:
        assert e.max_model_len >= e.run_tokens
        assert e.kv_pool >= e.min_kv
        assert e.concurrent_runs >= 1
        assert 0 < e.gpu_memory_utilization <= 1
    for d in devices:
        on = [e for e in plan.engines if d.index in e.devices]
        used = sum(e.gpu_memory_utilization * d.total_bytes + e.outside for e in on)
        assert used <= d.free_bytes  # every engine's share is free when it starts


@pytest.mark.parametrize("small, large", PAIRS)
@pytest.mark.parametrize("size", CARDS)
def test_plans_on_real_configs_and_cards(small, large, size):
    devices = card(size)
    plan = plan_memory(pair(small, large), devices)
    weights = sum(e.weights for e in plan.engines)
    if weights > devices[0].free_bytes:
        assert not plan.fits
        assert any("weights alone" in p for p in plan.problems)
    if plan.fits:
        check_invariants(plan, devices)
        planned = plan.apply(pair(small, large))
        for _, _, spec in planned.members():
            assert {"gpu_memory_utilization", "max_model_len"} <= set(spec.engine)
        return
    assert plan.problems and plan.fixes
    with pytest.raises(PlanError) as err:
        plan.apply(pair(small, large))
    assert "GiB" in str(err.value) and err.value.fix


def test_2b_8b_on_80gb_fits_and_on_16gb_is_refused_with_numbers_and_fixes():
    ok = plan_memory(pair("2B", "8B"), card("80GB"))
    assert ok.fits and ok.concurrent_runs >= 4
    refused = plan_memory(pair("2B", "8B"), card("16GB"))
    assert not refused.fits
    text = str(refused.error())
    assert "weights alone" in text and "14.90 GiB" in text
    assert "second GPU" in text and "remotely" in text


def test_2b_8b_on_24gb_fits_only_with_the_limits_the_plan_prints():
    plan = plan_memory(pair("2B", "8B"), card("24GB"))
    assert not plan.fits
    tried = [f for f in plan.fixes if "then" in f]
    assert tried, plan.fixes
    # Apply the printed fix and plan again: it fits.
    cap = {"max_pixels": 1048576}
    limited = pair(
        "2B",
        "8B",
        {"kv_cache_dtype": "fp8", "mm_processor_kwargs": cap},
        {"kv_cache_dtype": "fp8", "quantization": "fp8", "mm_processor_kwargs": cap},
    )
    again = plan_memory(limited, card("24GB"))
    assert again.fits, again.problems
    check_invariants(again, card("24GB"))


@pytest.mark.parametrize("size", ["24GB", "40GB"])
def test_every_listed_fix_makes_the_plan_fit(size):
    """The fixes are tried, not guessed: each 'then N runs' fix re-planned fits."""
    from mai_graph.deploy import plan as planning

    lineup = pair("2B", "8B") if size == "24GB" else pair("8B", "32B")
    plan = plan_memory(lineup, card(size))
    assert not plan.fits
    shapes = {s.model: read_shape(s.model) for _, _, s in lineup.members()}
    seen = planning._fixes(lineup, card(size), Workload.from_context(), shapes, plan)
    assert seen == plan.fixes


def test_user_options_are_kept_and_checked():
    lineup = pair("2B", "8B", {"gpu_memory_utilization": 0.2, "max_model_len": 32768})
    plan = plan_memory(lineup, card("80GB"))
    assert plan.fits
    small = plan.engines[0]
    assert small.gpu_memory_utilization == 0.2 and small.max_model_len == 32768
    applied = plan.apply(lineup)
    assert applied.small.engine["gpu_memory_utilization"] == 0.2
    assert applied.large.engine["gpu_memory_utilization"] <= 0.98 - 0.2
    too_small = plan_memory(pair("2B", "8B", {"max_model_len": 2048}), card("80GB"))
    assert not too_small.fits
    assert "max_model_len=2,048 is below" in too_small.problems[0]
    share_too_small = plan_memory(pair("2B", "8B", {"gpu_memory_utilization": 0.05}), card("80GB"))
    assert not share_too_small.fits
    assert "gpu_memory_utilization=0.05" in share_too_small.problems[0]


def test_pixel_cap_and_fp8_and_quantization_shrink_the_plan():
    base = plan_memory(pair("2B", "8B"), card("80GB"))
    cap = {"mm_processor_kwargs": {"max_pixels": 1048576}}
    capped = plan_memory(pair("2B", "8B", cap, cap), card("80GB"))
    assert capped.engines[1].run_tokens < base.engines[1].run_tokens
    assert capped.concurrent_runs > base.concurrent_runs
    quant = plan_memory(pair("2B", "8B", None, {"quantization": "fp8"}), card("80GB"))
    # fp8 halves the text model's linear layers; embeddings, lm_head and the ViT stay bf16
    assert quant.engines[1].weights < 0.65 * base.engines[1].weights


def test_two_cards_one_model_each_and_tensor_parallel():
    plan = plan_memory(pair("2B", "32B", None, {"device_ids": [1]}), card("80GB", 2))
    assert plan.fits
    assert [e.devices for e in plan.engines] == [(0,), (1,)]
    # Alone on its card each engine takes almost all of it.
    assert all(e.gpu_memory_utilization > 0.9 for e in plan.engines)
    tp = plan_memory(pair("8B", "32B", {"tensor_parallel_size": 2}, {"tensor_parallel_size": 2}),
                     card("40GB", 2))  # fmt: skip
    big = tp.engines[1]
    assert big.devices == (0, 1) and big.weights == pytest.approx(
        read_shape(str(DATA / "32B")).weights() / 2, rel=1e-6
    )
    wrong = plan_memory(pair("2B", "8B", None, {"device_ids": [3]}), card("80GB", 2))
    assert not wrong.fits and "device(s) [3]" in wrong.problems[0]


def test_a_chain_and_drafters_plan_every_engine():
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model=str(DATA / "2B")),
                        drafters=[ModelSpec(model=str(DATA / "4B"))],
                        large=ModelSpec(model=str(DATA / "8B")),
                        larger=[ModelSpec(model=str(DATA / "32B"))])  # fmt: skip
    plan = plan_memory(lineup, card("141GB"))
    assert [e.label for e in plan.engines] == ["small", "drafter 2", "large", "larger 1"]
    assert plan.fits, plan.problems
    check_invariants(plan, card("141GB"))
    # The large model also reasons (it is the next stage's small model): it holds a CoT.
    reasoner = (
        Workload.from_context().for_model(plan.engines[2].image_tokens).context_tokens("small")
    )
    assert plan.engines[2].run_tokens >= reasoner


def test_remote_and_transformers_models_need_no_plan():
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model=str(DATA / "2B")),
                        large=ModelSpec(model="served", url="http://h:1/v1"))  # fmt: skip
    plan = plan_memory(lineup, card("16GB"))
    assert [e.label for e in plan.engines] == ["small"] and plan.fits


def test_a_workload_from_the_run_settings():
    from mai_graph import MAIContext

    w = Workload.from_context(MAIContext(cot_max_tokens=2000, keep_ratio=0.5))
    assert (w.cot_tokens, w.transfer_tokens) == (2000, 1000)
    w = Workload.from_context(MAIContext(sparsify="none", cot_max_tokens=4000))
    assert w.transfer_tokens == 2048  # max_transfer_tokens


def test_plan_for_start_applies_on_a_gpu_and_refuses_before_any_engine(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    planned = plan_for_start(pair("2B", "8B"), devices=card("80GB"))
    assert planned.small.engine["gpu_memory_utilization"] > 0
    with pytest.raises(PlanError, match="does not fit"):
        plan_for_start(pair("2B", "8B"), devices=card("16GB"))
    # A hub id that is not on this machine: refused when the plan must choose its share ...
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model="Qwen/Not-Here-2B"),
                        large=ModelSpec(model=str(DATA / "8B")))  # fmt: skip
    with pytest.raises(ConfigError, match="no config.json for 'Qwen/Not-Here-2B'") as err:
        plan_for_start(lineup, devices=card("80GB"))
    assert "hf download" in err.value.fix
    # ... and passed to vLLM as given when every share is set.
    given = lineup.model_copy(update={
        "small": lineup.small.with_engine(gpu_memory_utilization=0.3),
        "large": lineup.large.with_engine(gpu_memory_utilization=0.6)})  # fmt: skip
    assert plan_for_start(given, devices=card("80GB")) == given


def test_the_cpu_plan_checks_the_kv_cache():
    from mai_graph.deploy.plan import host_device
    from mai_graph.pair import trained_pair_paths

    small, large = (str(p) for p in trained_pair_paths())
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model=small), large=ModelSpec(model=large))
    plan = plan_memory(lineup, [host_device()])
    assert plan.fits and all(e.kv_pool == 2**30 for e in plan.engines)
    big = plan_memory(lineup.replace("large", lineup.large.with_engine(max_model_len=10**6)),
                      [host_device()])  # fmt: skip
    assert not big.fits and "holds" in big.problems[0] and "kv_cache_gib" not in big.problems[0]
    assert plan_for_start(lineup, devices=[]) == lineup


@pytest.mark.parametrize(
    "raw, message",
    [("lots", "must be a size"), ("0GB", "positive"), ("-4GiB", "must be a size"),
     (True, "must be a size")],
)  # fmt: skip
def test_bad_sizes(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_size(raw)


def test_bad_or_missing_configs_are_named(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read config.json"):
        read_shape(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "x"}))
    with pytest.raises(ConfigError, match="lacks a field"):
        read_shape(str(tmp_path))
    with pytest.raises(ConfigError, match="no config.json"):
        read_shape(str(tmp_path / "nowhere"))


def test_the_plan_prints_a_table_and_json():
    plan = plan_memory(pair("2B", "8B"), card("80GB"))
    table = plan.table()
    assert "share" in table and "fits: yes" in table and "147456" not in table
    data = plan.to_dict()
    json.dumps(data)
    assert data["fits"] and len(data["engines"]) == 2


def test_engines_about_to_start_fetch_only_the_config_files(monkeypatch, tmp_path):
    """A hub id not downloaded yet: its config files are fetched (never weights), then planned."""
    import huggingface_hub

    fetched = []

    def fake_download(repo_id, filename, cache_dir=None):
        fetched.append((repo_id, filename))
        source = DATA / repo_id.split("-")[-2] / filename  # Qwen/Qwen3-VL-8B-Instruct -> 8B
        if not source.exists():
            raise FileNotFoundError(filename)
        target = tmp_path / repo_id.replace("/", "--") / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.read_text())
        return str(target)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model="Qwen/Qwen3-VL-2B-Instruct"),
                        large=ModelSpec(model="Qwen/Qwen3-VL-8B-Instruct"))  # fmt: skip
    planned = plan_for_start(lineup, devices=card("80GB"))
    assert (
        planned.large.engine["gpu_memory_utilization"]
        > planned.small.engine["gpu_memory_utilization"]
    )
    assert {f for _, f in fetched} <= {"config.json", "preprocessor_config.json",
                                        "model.safetensors.index.json"}  # fmt: skip
    # A dry run never fetches.
    fetched.clear()
    other = LineupSpec(backend="vllm", small=ModelSpec(model="acme/Qwen3-VL-4B-Instruct"),
                       large=ModelSpec(model="acme/Qwen3-VL-32B-Instruct"))  # fmt: skip
    with pytest.raises(ConfigError, match="nothing is downloaded"):
        plan_memory(other, card("80GB"))
    assert fetched == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="could not be fetched"):
        plan_for_start(other, devices=card("80GB"))


def test_published_models_plan_offline_from_the_shipped_configs(monkeypatch, tmp_path):
    """`mai-graph plan` for the lineups the docs name works on a fresh machine, offline."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing downloaded
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model="Qwen/Qwen3-VL-2B-Instruct"),
                        large=ModelSpec(model="Qwen/Qwen3-VL-8B-Thinking"))  # fmt: skip
    plan = plan_memory(lineup, card("80GB"))
    assert plan.fits and plan.engines[1].parameters == read_shape(str(DATA / "8B")).parameters
    assert plan_for_start(lineup, devices=card("80GB")).small.engine["gpu_memory_utilization"]


@pytest.mark.parametrize(
    "options, parameter, message",
    [
        ({"max_num_seqs": 0}, "max_num_seqs", "max_num_seqs must be an integer from 1"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size", "tensor_parallel_size must be"),
        ({"max_num_batched_tokens": -1}, "max_num_batched_tokens", "from 1"),
        ({"max_model_len": 2.5}, "max_model_len", "got 2.5"),
        ({"device_ids": [0, 0]}, "device_ids", "distinct card indices"),
        ({"device_ids": [0], "tensor_parallel_size": 2}, "device_ids", "1 card"),
        ({"mm_processor_kwargs": {"max_pixels": 10}}, "mm_processor_kwargs.max_pixels",
         "at least 1024 pixels"),
    ],
)  # fmt: skip
def test_nonsense_engine_options_are_refused_not_planned_as_fitting(options, parameter, message):
    with pytest.raises(ConfigError, match=message) as err:
        plan_memory(pair("2B", "8B", options), card("80GB"))
    assert err.value.parameter == parameter and err.value.fix
    with pytest.raises(ConfigError, match="--max-pixels") as err:
        plan_memory(pair("2B", "8B"), card("80GB"), Workload.from_context(max_pixels=1))


def test_the_plan_command_refuses_nonsense_and_flags_it_would_ignore(capsys):
    from mai_graph.cli import EXIT_USAGE, main

    models = ["--small", str(DATA / "2B"), "--large", str(DATA / "8B"), "--gpu-memory", "80GB"]
    assert main(["plan", *models, "--max-pixels", "1"]) == EXIT_USAGE
    assert "--max-pixels must be an integer from 1024" in capsys.readouterr().err
    assert main(["plan", *models, "--engine", "max_num_seqs=0"]) == EXIT_USAGE
    assert "max_num_seqs must be" in capsys.readouterr().err
    assert main(["plan", *models[:4], "--gpus", "2"]) == EXIT_USAGE
    assert "--gpus plans for that many cards of --gpu-memory" in capsys.readouterr().err
    assert main(["plan", *models, "--gpus", "2"]) == 0
    assert "cuda:1" in capsys.readouterr().out
