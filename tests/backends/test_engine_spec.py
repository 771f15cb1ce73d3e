"""ModelSpec / LineupSpec: one declaration of a model and its engine, checked before any start."""

import json

import pytest

from mai_graph import ConfigError, LineupSpec, ModelSpec, load_lineup
from mai_graph.deploy.select import backends_from_env, lineup_spec
from mai_graph.deploy.spec import engine_options_from_items, engine_options_from_json

pytest.importorskip("vllm")


def build(**engine):
    return ModelSpec(model="m", backend="vllm", **engine).build(role="small")


def test_flat_options_are_engine_options_and_keys_normalize():
    spec = ModelSpec(model="m", **{"max-model-len": 8192}, engine={"dtype": "bfloat16"})
    assert spec.engine == {"dtype": "bfloat16", "max_model_len": 8192}


def test_engine_options_reach_the_engine_args():
    backend = build(max_model_len=2048, dtype="bfloat16", max_num_seqs=7, kv_cache_gib=2,
                    mm_processor_kwargs={"max_pixels": 1048576}, kv_cache_dtype="fp8",
                    limit_mm_per_prompt={"image": 2, "video": 0}, device_ids=[1])  # fmt: skip
    args = backend.engine_args()
    assert (args.max_model_len, args.dtype, args.max_num_seqs) == (2048, "bfloat16", 7)
    assert args.mm_processor_kwargs == {"max_pixels": 1048576}
    assert args.kv_cache_dtype == "fp8" and args.device_ids == [1]
    assert args.limit_mm_per_prompt == {"image": 2, "video": 0}


@pytest.mark.parametrize(
    "options, message, names",
    [
        ({"max_model_lenn": 10}, "unknown engine option 'max_model_lenn'", "max_model_len"),
        ({"gpu_memory": 0.3}, "unknown engine option 'gpu_memory'", "gpu_memory_utilization"),
        ({"kv_cache_gb": 2}, "unknown engine option 'kv_cache_gb'", "kv_cache_gib"),
        ({"max_model_len": "abc"}, "max_model_len='abc' is invalid", "valid integer"),
        ({"max_model_len": 2.5}, "max_model_len=2.5 is invalid", "fractional"),
        ({"dtype": "bf17"}, "dtype='bf17' is invalid", "bfloat16"),
        ({"kv_cache_dtype": "fp9"}, "kv_cache_dtype='fp9' is invalid", "fp8"),
        ({"enforce_eager": 3}, "enforce_eager=3 is invalid", "boolean"),
        ({"tensor_parallel_size": "two"}, "tensor_parallel_size='two' is invalid", "integer"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization must be in (0, 1]", "0.25"),
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization must be in (0, 1]", "share"),
        ({"gpu_memory_utilization": True}, "gpu_memory_utilization must be in (0, 1]", ""),
        ({"quantization": "awqq"}, "unknown quantization method 'awqq'", "awq"),
        ({"kv_cache_gib": -1}, "kv_cache_gib must be a number of GiB > 0", "kv_cache_gib=2"),
        ({"kv_cache_gib": "1"}, "kv_cache_gib must be a number of GiB > 0", ""),
        ({"max_restarts": -2}, "max_restarts must be an integer >= 0", "default"),
        (
            {"mm_processor_kwargs": "max_pixels=5"},
            "mm_processor_kwargs='max_pixels=5' is invalid",
            "dictionary",
        ),
        ({"limit_mm_per_prompt": {"image": "x"}}, "limit_mm_per_prompt", ""),
    ],
)
def test_bad_vllm_options_are_named_before_any_engine(options, message, names):
    with pytest.raises(ConfigError) as err:
        build(**options)
    text = str(err.value)
    assert message in text and names in text, text


def test_model_is_not_an_engine_option():
    with pytest.raises(ConfigError, match="the model is the spec's model"):
        ModelSpec(model="m", backend="vllm", engine={"model": "other"}).build()


def test_a_typo_lists_the_common_options():
    with pytest.raises(ConfigError) as err:
        build(max_num_seq=4)
    assert "did you mean max_num_seqs" in str(err.value)
    assert "gpu_memory_utilization" in err.value.fix and "kv_cache_gib" in err.value.fix


@pytest.mark.parametrize("kind, options, message", [
    ("transformers", {"gpu_memory_utilization": 0.5}, "unknown engine option"),
    ("transformers", {"kv_cache_dtype": "fp8"}, "unknown engine option"),
    ("transformers", {"max_model_len": 1}, "max_model_len must be an integer >= 2"),
    ("openai", {"max_model_len": 10}, "unknown engine option 'max_model_len'"),
    ("openai", {"retries": -1}, "retries must be an integer >= 0"),
])  # fmt: skip
def test_other_kinds_take_their_own_options(kind, options, message):
    with pytest.raises(ConfigError, match=message):
        ModelSpec(model="m", backend=kind, url="http://h:1/v1" if kind == "openai" else None,
                  **options).build()  # fmt: skip


def test_transformers_and_openai_options_reach_their_backends():
    t = ModelSpec(model="m", backend="transformers", dtype="bfloat16", threads=1,
                  max_model_len=2048).build()  # fmt: skip
    assert t._dtype == "bfloat16" and t._threads == 1 and t.max_model_len == 2048
    o = ModelSpec(model="served", url="http://h:9/v1", timeout_s=7, retries=0, name="big").build()
    assert type(o).__name__ == "OpenAIBackend" and o.name == "big"
    assert o.client.max_retries == 0


@pytest.mark.parametrize("data, message", [
    ({"model": ""}, "at least 1 character"),
    ({"model": "m", "backend": "gpu"}, "Input should be"),
    ({"model": "m", "api_key_env": "not a name"}, "pattern"),
    ({"model": "m", "engine": 5}, "engine must be a table"),
    ({"model": "m", "engine": {"bad key": 1}}, "identifiers"),
])  # fmt: skip
def test_bad_specs_are_refused(data, message):
    with pytest.raises(Exception, match=message):
        ModelSpec.model_validate(data)


def test_lineup_file_toml(tmp_path):
    path = tmp_path / "lineup.toml"
    path.write_text(
        'backend = "vllm"\n[small]\nmodel = "s"\nmax_model_len = 4096\n'
        '[large]\nmodel = "l"\n[large.engine]\nkv_cache_dtype = "fp8"\n'
        '[[drafters]]\nmodel = "d"\nmax_num_seqs = 8\n'
        '[[larger]]\nmodel = "xl"\nbackend = "openai"\nurl = "http://h:1/v1"\n'
    )
    lineup = load_lineup(path)
    assert [(label, spec.model) for label, _, spec in lineup.members()] == [
        ("small", "s"),
        ("drafter 2", "d"),
        ("large", "l"),
        ("larger 1", "xl"),
    ]
    small, large = lineup.build()
    assert [b.name for b in small] == ["s", "d"] and [b.name for b in large] == ["l", "xl"]
    assert small[0].engine_args().max_model_len == 4096
    assert small[1].engine_args().max_num_seqs == 8
    assert large[0].engine_args().kv_cache_dtype == "fp8"
    assert type(large[1]).__name__ == "OpenAIBackend"


def test_lineup_file_json_and_the_flags_over_it(tmp_path):
    path = tmp_path / "lineup.json"
    path.write_text(json.dumps({"backend": "vllm", "small": {"model": "s", "max_model_len": 4096},
                                "large": {"model": "l", "dtype": "float16"}}))  # fmt: skip
    lineup = lineup_spec(
        None,
        None,
        "l2",
        base=load_lineup(path),
        engines=({"max_model_len": 2048}, None),
        common_engine={"seed": 3},
    )
    assert lineup.small.engine == {"max_model_len": 2048, "seed": 3}
    assert lineup.large.model == "l2" and lineup.large.engine == {"dtype": "float16", "seed": 3}


@pytest.mark.parametrize("text, suffix, message", [
    ("backend = 'vllm'\n[small\n", ".toml", "does not parse"),
    ("{", ".json", "does not parse"),
    ("[1, 2]", ".json", "a lineup is a table"),
    ('{"small": {"model": "s"}, "extra": 1}', ".json", "extra: Extra inputs are not permitted"),
    ('{"backend": "vllm", "small": {"model": "s", "max_model_lenn": 1}}', ".json",
     "unknown engine option 'max_model_lenn'"),
    ('{"small": {"model": "s", "max_model_len": "x"}, "backend": "vllm"}', ".json", "invalid"),
    ("[" * 10000 + "]" * 10000, ".json", "does not parse"),
    ('{"drafters": [' + ",".join(['{"model": "d"}'] * 17) + "]}", ".json", "at most 16"),
])  # fmt: skip
def test_bad_lineup_files_name_the_file_and_the_problem(tmp_path, text, suffix, message):
    path = tmp_path / f"lineup{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_lineup(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_unreadable_lineup_paths(tmp_path):
    for path, problem in ((tmp_path / "missing.toml", "not found"), (tmp_path, "is a folder")):
        with pytest.raises(ConfigError, match=f"--lineup: lineup file {problem}"):
            load_lineup(path)
    binary = tmp_path / "x.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="--lineup: lineup file is not UTF-8"):
        load_lineup(binary)


@pytest.mark.parametrize("items, message", [
    (["max_model_len"], "needs KEY=VALUE"),
    (["=3"], "needs KEY=VALUE"),
    (["bad key=3"], "needs KEY=VALUE"),
])  # fmt: skip
def test_bad_engine_flags(items, message):
    with pytest.raises(ConfigError, match=message):
        engine_options_from_items(items, "--small-engine")


def test_engine_flag_values_are_json_where_they_parse():
    assert engine_options_from_items(["enforce-eager=true", "dtype=auto", "x=[1,2]"], "f") == {
        "enforce_eager": True,
        "dtype": "auto",
        "x": [1, 2],
    }


@pytest.mark.parametrize("raw", ["max_model_len=5", "[1]", "{", '"x"'])
def test_bad_engine_variables(raw):
    with pytest.raises(ConfigError, match="must be a JSON object"):
        engine_options_from_json(raw, "MAI_GRAPH_SMALL_ENGINE")


def test_environment_engine_options_and_lineup_file(tmp_path):
    path = tmp_path / "l.toml"
    path.write_text('backend = "vllm"\n[small]\nmodel = "s"\n[large]\nmodel = "l"\n')
    env = {"MAI_GRAPH_LINEUP": str(path), "MAI_GRAPH_ENGINE": '{"seed": 5}',
           "MAI_GRAPH_SMALL_ENGINE": '{"max_model_len": 1024}',
           "MAI_GRAPH_LARGE_ENGINE": '{"dtype": "float16"}', "MAI_GRAPH_DRAFTERS": "d",
           "MAI_GRAPH_DRAFTER_ENGINE": '{"max_num_seqs": 3}', "MAI_GRAPH_LARGER": "xl",
           "MAI_GRAPH_LARGER_ENGINE": '{"max_model_len": 512}'}  # fmt: skip
    small, large = backends_from_env(env)
    args = [b.engine_args() for b in (*small, *large)]
    assert [a.model for a in args] == ["s", "d", "l", "xl"]
    assert [a.seed for a in args] == [5, 5, 5, 5]
    assert args[0].max_model_len == 1024 and args[1].max_num_seqs == 3
    assert args[2].dtype == "float16" and args[3].max_model_len == 512


@pytest.mark.parametrize("env, message", [
    ({"MAI_GRAPH_LINEUP": "/nonexistent/lineup.toml"}, "MAI_GRAPH_LINEUP: lineup file not found"),
    ({"MAI_GRAPH_BACKEND": "vllm", "MAI_GRAPH_SMALL": "s", "MAI_GRAPH_LARGE": "l",
      "MAI_GRAPH_SMALL_ENGINE": '{"max_model_lenn": 1}'}, "unknown engine option"),
    ({"MAI_GRAPH_BACKEND": "vllm", "MAI_GRAPH_SMALL": "s", "MAI_GRAPH_LARGE": "l",
      "MAI_GRAPH_LARGE_ENGINE": "dtype=half"}, "MAI_GRAPH_LARGE_ENGINE must be a JSON object"),
    ({"MAI_GRAPH_BACKEND": "vllm", "MAI_GRAPH_SMALL": "s", "MAI_GRAPH_LARGE": "l",
      "MAI_GRAPH_PLAN": "maybe"}, "MAI_GRAPH_PLAN must be auto or off"),
    ({"MAI_GRAPH_BACKEND": "vllm", "MAI_GRAPH_SMALL": "s", "MAI_GRAPH_LARGE": "l",
      "MAI_GRAPH_GPU_MEMORY": "lots"}, "must be a size"),
])  # fmt: skip
def test_bad_environment_is_named(env, message):
    with pytest.raises(ConfigError, match=message):
        backends_from_env(env)


def test_lineup_spec_round_trips_through_json():
    lineup = LineupSpec(backend="vllm", small=ModelSpec(model="s", max_model_len=5),
                        large=ModelSpec(model="l"))  # fmt: skip
    again = LineupSpec.model_validate_json(lineup.model_dump_json())
    assert again == lineup
