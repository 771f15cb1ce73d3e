"""Every supported vLLM release, checked statically: what mai-graph relies on is in its wheel.

``tests/data/vllm_api/<version>.json`` is read out of each release's wheel by
``scripts/vllm_api_extract.py`` (downloaded with ``pip download --no-deps vllm==X``, parsed
with ``ast``, never installed); CI needs no wheel. A failure names the version and the name.
"""

import json
import re
import tomllib
from pathlib import Path

import pytest

from mai_graph.backends.vllm import compat
from mai_graph.deploy import plan as plan_module
from mai_graph.deploy.spec import VLLM_COMMON, VLLM_OWN_OPTIONS

ROOT = Path(__file__).parents[2]
EXTRACTS = sorted((ROOT / "tests" / "data" / "vllm_api").glob("*.json"))
VERSIONS = [p.stem for p in EXTRACTS]


def _version(v: str) -> tuple[int, ...]:
    parts = [int(x) for x in re.findall(r"\d+", v)[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def load(version):
    return json.loads((ROOT / "tests" / "data" / "vllm_api" / f"{version}.json").read_text())


def test_every_supported_minor_release_has_an_extract():
    low, high = (_version(v) for v in compat.TESTED_VLLM)
    minors = {(a, b) for a, b, *_ in map(_version, VERSIONS)}
    wanted = {(low[0], m) for m in range(low[1], high[1])}
    assert wanted <= minors, f"no extract for {sorted(wanted - minors)}"
    assert all(low <= _version(v) < high for v in VERSIONS)


@pytest.mark.parametrize("version", VERSIONS)
def test_engine_arguments_exist(version):
    fields = set(load(version)["engine_args"])
    used = set(compat.ENGINE_ARGS_USED) | (set(VLLM_COMMON) - set(VLLM_OWN_OPTIONS))
    missing = sorted(used - fields)
    assert not missing, f"vLLM {version}: AsyncEngineArgs has no {missing}"


@pytest.mark.parametrize("version", VERSIONS)
def test_sampling_fields_exist(version):
    data = load(version)
    missing = sorted(set(compat.SAMPLING_FIELDS_USED) - set(data["sampling_params"]))
    assert not missing, f"vLLM {version}: SamplingParams has no {missing}"
    assert "choice" in data["structured_outputs_params"], f"vLLM {version}: no choice outputs"


@pytest.mark.parametrize("version", VERSIONS)
def test_internals_exist(version):
    internals = load(version)["internals"]
    assert set(internals) == {name for name, *_ in compat.STATIC_CHECKS}, "re-run the extract"
    missing = sorted(name for name, ok in internals.items() if not ok)
    assert not missing, f"vLLM {version} lacks {missing}"


@pytest.mark.parametrize("version", VERSIONS)
def test_defaults_the_project_relies_on(version):
    from mai_graph.backends.vllm.translate import MAX_LOGPROB_TOKEN_IDS

    data = load(version)
    # The plan's batch assumptions are what an in-process AsyncLLM gets (and it writes them).
    assert data["scheduler_defaults"] == {
        "max_num_batched_tokens": plan_module.DEFAULT_BATCHED_TOKENS,
        "max_num_seqs": plan_module.DEFAULT_MAX_SEQS,
    }, f"vLLM {version}"
    assert data["max_logprob_token_ids"] == MAX_LOGPROB_TOKEN_IDS, f"vLLM {version}"
    # The plan's fixed pool is vLLM's kv_cache_memory_bytes; vLLM forks unless told to spawn.
    assert data["cache_defaults"]["kv_cache_memory_bytes"], f"vLLM {version}"
    assert data["worker_multiproc_method_default"] == "fork", f"vLLM {version}"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_fixes_the_plan_offers_are_spelled_as_this_version_spells_them(version):
    data = load(version)
    assert "fp8_per_tensor" in data["quantization_methods"], f"vLLM {version}"
    assert "fp8" in data["cache_dtypes"], f"vLLM {version}"


def test_vllm_034_memory_default_is_why_every_share_is_explicit():
    """0.34 resolves an unset share to 1.0 under its extensible KV cache; 0.32 used 0.92."""
    by_version = {v: load(v)["cache_defaults"] for v in VERSIONS}
    assert "0.92" in by_version["0.32.0"]["gpu_memory_utilization"]
    assert "default=None" in by_version["0.34.0"]["gpu_memory_utilization"]
    assert by_version["0.34.0"]["enable_extensible_kv_cache"]


def test_the_gpu_extra_admits_every_supported_version_and_its_transformers():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = data["project"]["optional-dependencies"]["vllm"]
    transformers = next(d for d in extra if d.startswith("transformers"))
    upper = _version(re.search(r"<([\d.]+)", transformers).group(1))
    lower = _version(re.search(r">=([\d.]+)", transformers).group(1))
    for version in VERSIONS:
        pin = next(r for r in load(version)["requires"] if r.startswith("transformers"))
        their_upper = _version(re.search(r"<([\d.]+)", pin).group(1))
        their_lower = _version(re.search(r">=([\d.]+)", pin).group(1))
        assert lower <= their_lower and their_upper <= upper, f"vLLM {version}: {pin}"
