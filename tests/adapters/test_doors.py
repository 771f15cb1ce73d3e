"""Every door passes engine options through to the engines, and the memory plan runs first.

Each door is driven as a user drives it (the CLI's main, the environment Studio and the
endpoint read) up to the moment it would start engines; the test then reads the
``AsyncEngineArgs`` each engine would start with (``VLLMBackend.engine_args()``, the call the
engine start makes). Drafters and a chain stage are included. A fake GPU (the device probe
replaced) shows the plan filling shares and context lengths, and refusing a lineup that cannot
fit before any engine is built.
"""

from pathlib import Path

import pytest

from mai_graph.cli import EXIT_USAGE, main

pytest.importorskip("vllm")

DATA = Path(__file__).parents[2] / "mai_graph" / "deploy" / "configs" / "qwen3_vl"
S, L, D, XL = (str(DATA / s) for s in ("2B", "8B", "4B", "32B"))

ENGINE_FLAGS = [
    "--backend", "vllm", "--small", S, "--large", L,
    "--engine", "seed=7",
    "--small-engine", "max_model_len=8192", "--small-engine", "dtype=bfloat16",
    "--small-engine", 'mm_processor_kwargs={"max_pixels": 1048576}',
    "--large-engine", "kv_cache_dtype=fp8", "--large-engine", "max_num_seqs=16",
    "--drafter", D, "--drafter-engine", "max_model_len=4096",
    "--larger", XL, "--larger-engine", "tensor_parallel_size=2",
    "--no-plan",
]  # fmt: skip


class Captured(BaseException):
    """Raised where the door would start its engines (a BaseException: the CLI reports any
    Exception as an internal error, and this one must reach the test)."""

    def __init__(self, backends):
        super().__init__("captured")
        self.backends = backends


def flat(*sides):
    out = []
    for side in sides:
        out += list(side) if isinstance(side, list | tuple) else [side]
    return out


@pytest.fixture
def capture(monkeypatch):
    """Stop each door where its engines would start, keeping the backends it built."""
    import mai_graph.api
    import mai_graph.backends.lifecycle
    import mai_graph.cli.serve

    async def stop_arun(question, image=None, *, small, large, **_):
        raise Captured(flat(small, large))

    async def stop_start(*backends):
        raise Captured(flat(*backends))

    def stop_serve(args, context, backends):
        raise Captured(flat(*backends))

    monkeypatch.setattr(mai_graph.api, "arun", stop_arun)
    monkeypatch.setattr(mai_graph.backends.lifecycle, "start_backends", stop_start)
    monkeypatch.setattr(mai_graph.cli.serve, "run_server", stop_serve)


def engine_args(backends):
    return {b.model: b.engine_args() for b in backends}


def check_options(args):
    assert list(args) == [S, D, L, XL]
    assert {a.seed for a in args.values()} == {7}
    assert args[S].max_model_len == 8192 and args[S].dtype == "bfloat16"
    assert args[S].mm_processor_kwargs == {"max_pixels": 1048576}
    assert args[D].max_model_len == 4096
    assert args[L].kv_cache_dtype == "fp8" and args[L].max_num_seqs == 16
    assert args[XL].tensor_parallel_size == 2
    assert all(a.enable_prefix_caching for a in args.values())


@pytest.fixture
def dataset(tmp_path):
    from mai_graph.cli import main as cli

    assert cli(["synth-data", str(tmp_path / "data"), "--n", "2"]) == 0
    return str(tmp_path / "data" / "data.jsonl")


@pytest.fixture
def image(tmp_path):
    from PIL import Image

    path = tmp_path / "x.png"
    Image.new("RGB", (64, 64), (200, 0, 0)).save(path)
    return str(path)


@pytest.mark.slow
def test_run_passes_every_models_options(capture, image):
    with pytest.raises(Captured) as got:
        main(["run", "Is it red?", "--image", image, *ENGINE_FLAGS])
    check_options(engine_args(got.value.backends))


def test_serve_passes_every_models_options(capture):
    with pytest.raises(Captured) as got:
        main(["serve", "--port", "8999", *ENGINE_FLAGS])
    check_options(engine_args(got.value.backends))


def test_eval_passes_every_models_options(capture, dataset, tmp_path):
    with pytest.raises(Captured) as got:
        main(["eval", "--data", dataset, "--out", str(tmp_path / "out"), "--no-progress",
              *ENGINE_FLAGS])  # fmt: skip
    check_options(engine_args(got.value.backends))


def test_profile_passes_both_models_options(capture):
    flags = [f for f in ENGINE_FLAGS]
    cut = flags.index("--drafter")
    flags = flags[:cut] + ["--no-plan"]  # profile measures a pair (no drafters or chain)
    with pytest.raises(Captured) as got:
        main(["profile", *flags, "--rounds", "2"])
    args = engine_args(got.value.backends)
    assert list(args) == [S, L]
    assert args[S].max_model_len == 8192 and args[L].kv_cache_dtype == "fp8"


def test_the_environment_passes_every_models_options():
    from mai_graph.deploy.select import backends_from_env

    env = {
        "MAI_GRAPH_BACKEND": "vllm", "MAI_GRAPH_SMALL": S, "MAI_GRAPH_LARGE": L,
        "MAI_GRAPH_ENGINE": '{"seed": 7}',
        "MAI_GRAPH_SMALL_ENGINE": '{"max_model_len": 8192, "dtype": "bfloat16", '
                                  '"mm_processor_kwargs": {"max_pixels": 1048576}}',
        "MAI_GRAPH_LARGE_ENGINE": '{"kv_cache_dtype": "fp8", "max_num_seqs": 16}',
        "MAI_GRAPH_DRAFTERS": D, "MAI_GRAPH_DRAFTER_ENGINE": '{"max_model_len": 4096}',
        "MAI_GRAPH_LARGER": XL, "MAI_GRAPH_LARGER_ENGINE": '{"tensor_parallel_size": 2}',
        "MAI_GRAPH_PLAN": "off",
    }  # fmt: skip
    small, large = backends_from_env(env)
    check_options(engine_args(flat(small, large)))


def test_a_lineup_file_reaches_every_door(capture, tmp_path, image):
    path = tmp_path / "lineup.toml"
    path.write_text(
        f'backend = "vllm"\n[small]\nmodel = "{S}"\nmax_model_len = 8192\ndtype = "bfloat16"\n'
        f"seed = 7\nmm_processor_kwargs = {{ max_pixels = 1048576 }}\n"
        f'[large]\nmodel = "{L}"\nkv_cache_dtype = "fp8"\nmax_num_seqs = 16\nseed = 7\n'
        f'[[drafters]]\nmodel = "{D}"\nmax_model_len = 4096\nseed = 7\n'
        f'[[larger]]\nmodel = "{XL}"\ntensor_parallel_size = 2\nseed = 7\n'
    )
    with pytest.raises(Captured) as got:
        main(["run", "Is it red?", "--image", image, "--lineup", str(path), "--no-plan"])
    check_options(engine_args(got.value.backends))
    from mai_graph.deploy.select import backends_from_env

    small, large = backends_from_env({"MAI_GRAPH_LINEUP": str(path), "MAI_GRAPH_PLAN": "off"})
    check_options(engine_args(flat(small, large)))


def test_an_engine_option_typo_fails_before_any_engine(capture, image, capsys):
    code = main(["run", "q", "--image", image, "--backend", "vllm", "--small", S, "--large", L,
                 "--large-engine", "gpu_memory_utilisation=0.5"])  # fmt: skip
    assert code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown engine option 'gpu_memory_utilisation'" in err
    assert "did you mean gpu_memory_utilization" in err


@pytest.fixture
def gpu(monkeypatch):
    """A fake GPU of the given size (the device probe replaced)."""
    from mai_graph.deploy import plan
    from mai_graph.deploy.plan import Device, parse_size

    def set_card(size):
        b = parse_size(size)
        monkeypatch.setattr(plan, "probe_devices", lambda: [Device("cuda", 0, b, b, "fake")])

    return set_card


def test_on_a_gpu_the_doors_apply_the_plan(capture, gpu, image, dataset, tmp_path):
    gpu("80GB")
    pair = ["--backend", "vllm", "--small", S, "--large", L]
    doors = [
        ["run", "Is it red?", "--image", image, *pair],
        ["serve", *pair],
        ["eval", "--data", dataset, "--out", str(tmp_path / "o"), "--no-progress", *pair],
        ["profile", *pair, "--rounds", "2"],
    ]
    for argv in doors:
        with pytest.raises(Captured) as got:
            main(argv)
        args = engine_args(got.value.backends)
        shares = [a.gpu_memory_utilization for a in args.values()]
        assert 0.9 < sum(shares) < 0.98, (argv[0], shares)
        assert all(a.max_model_len >= 16_384 for a in args.values())  # one full-size image
    # The user's share is kept; the other engine gets the rest of the card.
    with pytest.raises(Captured) as got:
        main(["run", "q", "--image", image, *pair, "--small-engine",
              "gpu_memory_utilization=0.3"])  # fmt: skip
    args = engine_args(got.value.backends)
    assert args[S].gpu_memory_utilization == 0.3 and args[L].gpu_memory_utilization < 0.68
    # --gpu-memory plans for less than the card (another tenant on it).
    with pytest.raises(Captured) as got:
        main(["run", "q", "--image", image, *pair, "--gpu-memory", "60GiB"])
    assert sum(a.gpu_memory_utilization for a in engine_args(got.value.backends).values()) < 0.8


def test_on_a_small_gpu_every_door_refuses_before_any_engine(capture, gpu, image, capsys):
    gpu("16GB")
    pair = ["--backend", "vllm", "--small", S, "--large", L]
    for argv in (["run", "q", "--image", image, *pair], ["serve", *pair]):
        assert main(argv) == EXIT_USAGE  # no Captured: no engine was about to start
        err = capsys.readouterr().err
        assert "does not fit" in err and "weights alone" in err and "second GPU" in err
    from mai_graph import ConfigError
    from mai_graph.deploy.select import backends_from_env

    env = {"MAI_GRAPH_BACKEND": "vllm", "MAI_GRAPH_SMALL": S, "MAI_GRAPH_LARGE": L}
    with pytest.raises(ConfigError, match="does not fit"):
        backends_from_env(env)
    small, large = backends_from_env({**env, "MAI_GRAPH_PLAN": "off"})  # the user's call
    assert (small.model, large.model) == (S, L)


def test_gpu_memory_without_a_gpu_is_refused(capture, image, capsys):
    code = main(["run", "q", "--image", image, "--backend", "vllm", "--small", S, "--large", L,
                 "--gpu-memory", "40GiB"])  # fmt: skip
    assert code == EXIT_USAGE
    assert "this machine has none" in capsys.readouterr().err


def test_serve_with_drafters_and_a_chain_names_them(monkeypatch, capsys):
    """The defect: `serve --drafter` formatted a list's .name and crashed."""
    import mai_graph.cli.serve as serve

    monkeypatch.setattr(serve, "serve", lambda app, **kw: None)
    monkeypatch.setattr(serve, "create_app", lambda *a, **kw: object())
    code = main(["serve", "--backend", "vllm", "--small", S, "--large", L, "--drafter", D,
                 "--larger", XL, "--no-plan"])  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    assert f"({S}, {D} + {L}, {XL};" in err


def test_doctor_refuses_a_lineup_that_cannot_fit_before_starting_engines(gpu, capsys):
    gpu("16GB")
    code = main(["doctor", "--small", S, "--large", L])
    out = capsys.readouterr().out
    assert code == 1
    assert "memory plan" in out and "FAIL" in out and "weights alone" in out
    assert "start small" not in out


def test_doctor_plans_with_the_gpu_memory_it_is_given(gpu, capsys, monkeypatch):
    from mai_graph.cli import doctor

    async def no_engines(*args, **kwargs):
        raise AssertionError("the plan should have refused before any engine started")

    monkeypatch.setattr(doctor, "_run_engines", no_engines)
    gpu("80GB")  # fits there; --gpu-memory caps the card, as run and serve do
    code = main(["doctor", "--small", S, "--large", L, "--gpu-memory", "8GiB"])
    out = capsys.readouterr().out
    assert code == 1, out[-800:]
    assert "planned with at most 8GiB free per card" in out
    assert "memory plan" in out and "FAIL" in out and "start small" not in out


@pytest.mark.parametrize("argv, message", [
    (["--repeats", "0"], "--repeats must be in 1..100"),
    (["--cot-tokens", "0"], "--cot-tokens must be in 1..8192"),
    (["--concurrency", "1000"], "--concurrency must be in 0..256"),
])  # fmt: skip
def test_doctor_flags(argv, message, capsys):
    assert main(["doctor", *argv]) == EXIT_USAGE
    assert message in capsys.readouterr().err
