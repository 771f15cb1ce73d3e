"""The latency model: fitting, predictions, MAI algebra, what-if, JSON, eval and CLI (offline)."""

import json
import random
from types import SimpleNamespace

import pytest

from mai_graph.cli import EXIT_OK, EXIT_USAGE, main
from mai_graph.errors import ConfigError
from mai_graph.latency.model import (
    FEATURES,
    MODEL_ROUTES,
    CallSample,
    CallTokens,
    EngineProfile,
    LatencyModel,
    Workload,
    fit_engine,
    fit_overlap,
    parse_what_if,
)

POLICIES = ("mai", "small", "large", "small_cot", "large_cot")
TRUE = EngineProfile(
    name="true",
    call_s=0.006,
    prefill_token_s=2e-5,
    prefill_ktoken2_s=8e-5,
    image_s=0.012,
    choice_s=0.003,
    decode_token_s=0.0055,
    decode_ktoken2_s=0.004,
)

# The design `mai-graph profile` measures: (prompt tokens, generated, image, constrained).
DESIGN = [
    (55, 1, False, False), (55, 16, False, False), (55, 64, False, False),
    (290, 1, False, False), (290, 32, False, False), (780, 1, False, False),
    (780, 32, False, False), (120, 1, True, False), (120, 8, True, False),
    (120, 2, True, True),
]  # fmt: skip


def synthetic_samples(profile, *, noise=0.0, repeats=3, seed=0):
    rng = random.Random(seed)
    out = []
    for i, (prompt, n, image, con) in enumerate(DESIGN):
        for _ in range(repeats):
            shape = CallTokens("small", "profile", prompt, 0, n, image, con)
            true = profile.engine_time(shape)
            latency = true * (1 + rng.uniform(-noise, noise))
            out.append(CallSample(shape, latency, latency + 0.002, group=f"p{i}"))
    return out


def pair(**changes):
    small = TRUE.model_copy(update={"name": "s"})
    large = TRUE.model_copy(
        update={"name": "l", "decode_token_s": 0.02, "call_s": 0.012, "image_s": 0.01}
    )
    return LatencyModel(small=small, large=large, **changes)


# -- fitting -----------------------------------------------------------------------------------


def test_fit_recovers_known_costs_from_exact_calls():
    fitted = fit_engine("m", synthetic_samples(TRUE))
    for name in FEATURES:
        assert getattr(fitted, name) == pytest.approx(getattr(TRUE, name), rel=1e-3, abs=1e-9)
    assert fitted.client_s == pytest.approx(0.002)
    assert fitted.fit["max_rel_error"] < 1e-6
    assert fitted.decode_tok_s == pytest.approx(1 / 0.0055)


def test_fit_with_noise_stays_close_and_takes_medians():
    samples = synthetic_samples(TRUE, noise=0.03, repeats=5, seed=1)
    samples.append(CallSample(samples[0].shape, 5.0, group="p0"))  # one wild outlier
    fitted = fit_engine("m", samples)
    assert fitted.decode_token_s == pytest.approx(TRUE.decode_token_s, rel=0.05)
    for prompt, n, image, con in DESIGN:
        shape = CallTokens("small", "x", prompt, 0, n, image, con)
        assert fitted.engine_time(shape) == pytest.approx(TRUE.engine_time(shape), rel=0.05)


def test_fit_keeps_costs_non_negative_and_unused_features_at_zero():
    flat = EngineProfile(name="f", call_s=0.01, decode_token_s=0.002)
    samples = [s for s in synthetic_samples(flat) if not s.shape.image]
    fitted = fit_engine("f", samples)
    assert fitted.image_s == 0 and fitted.choice_s == 0
    assert all(getattr(fitted, f) >= 0 for f in FEATURES)
    assert fitted.call_s == pytest.approx(0.01, rel=1e-3)


def test_fit_is_the_exact_non_negative_least_squares_optimum():
    # Calls no non-negative profile explains exactly (the longest prompts are cheaper than
    # the shorter ones predict): the attention terms clip to 0, and the fit must be the true
    # NNLS optimum (KKT: zero gradient on the free coefficients, none negative on the clipped).
    rng = random.Random(3)
    samples = [
        CallSample(s.shape, s.latency_s * (0.5 if s.shape.uncached == 780 else 1.0) *
                   (1 + rng.uniform(-0.05, 0.05)), group=s.group)
        for s in synthetic_samples(TRUE)
    ]  # fmt: skip
    fitted = fit_engine("m", samples)
    groups = {}
    for s in samples:
        groups.setdefault(s.group, []).append(s)
    rows, coef = [], [getattr(fitted, f) for f in FEATURES]
    for g in groups.values():
        y = sorted(s.latency_s for s in g)[1]  # the median of three
        rows.append([f / y for f in g[0].shape.features()])
    residual = [sum(c * x for c, x in zip(coef, r)) - 1.0 for r in rows]
    for j, c in enumerate(coef):
        column = [r[j] for r in rows]
        norm = sum(x * x for x in column) ** 0.5 or 1.0
        gradient = sum(x * e for x, e in zip(column, residual)) / norm
        if c > 0:
            assert gradient == pytest.approx(0, abs=1e-9), FEATURES[j]
        else:
            assert gradient >= -1e-9, FEATURES[j]
    assert fitted.prefill_ktoken2_s == 0  # the constraint binds


def test_fit_without_scipy_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    with pytest.raises(ConfigError, match="needs SciPy") as err:
        fit_engine("m", synthetic_samples(TRUE))
    assert err.value.parameter == "scipy" and "mai-graph[eval]" in err.value.fix


def test_fit_refuses_too_little_variety():
    shape = CallTokens("small", "x", 50, 0, 1)
    with pytest.raises(ConfigError, match="three shapes"):
        fit_engine("m", [CallSample(shape, 0.01)] * 5)


def test_overlap_is_recovered_from_concurrent_pairs():
    model = pair()
    s = CallTokens("small", "verify", 200, 0, 2, True, True)
    lg = CallTokens("large", "verify", 200, 0, 2, True, True)
    a, b = model.call_time(s), model.call_time(lg)
    rounds = [(s, lg, max(a, b) + k * min(a, b)) for k in (0.3, 0.4, 0.5)]
    assert fit_overlap(model, rounds) == pytest.approx(0.4)
    assert fit_overlap(model, [(s, lg, 0.0)]) == 0.0  # clipped
    with pytest.raises(ConfigError):
        fit_overlap(model, [])


# -- predictions -------------------------------------------------------------------------------


def test_routes_are_their_calls_on_the_critical_path():
    model = pair(overlap=0.5, sparsify_s=0.001, run_s=0.01, node_s=0.002)
    w = Workload(prompt_tokens=200, cot_tokens=100)
    calls = w.calls("transfer")
    assert [(c.node, c.role) for c in calls] == [
        ("verify", "small"), ("verify", "large"), ("reason", "small"), ("extract", "small"),
        ("answer", "large"),
    ]  # fmt: skip
    assert calls[4].uncached == w.answer_uncached + 20  # keep 0.2 of 100 tokens
    t = [model.call_time(c) for c in calls]
    mv = max(t[:2]) + 0.5 * min(t[:2])
    critical = mv + t[2] + t[3] + 0.001 + t[4]
    assert model.predict_route("transfer", w, wall=False) == pytest.approx(critical)
    client = model.small.client_s * 3 + model.large.client_s  # one verify call counts
    assert model.predict_route("transfer", w) == pytest.approx(
        critical + 0.01 + 4 * 0.002 + client, rel=0.02
    )
    assert model.predict_route("agree", w) == model.predict_route("large_confident", w)
    routes = model.predict_routes(w)
    assert set(routes) == set(MODEL_ROUTES)
    assert routes["large_cot"] > routes["small_cot"] > routes["small"]
    assert routes["transfer"] > routes["extract_agree"] > routes["agree"]
    # Longer reasoning costs more on every reasoning route, nothing on the others.
    longer = model.predict_routes(w.model_copy(update={"cot_tokens": 400}))
    for route in ("extract_agree", "transfer", "small_cot", "large_cot"):
        assert longer[route] > routes[route]
    assert longer["agree"] == routes["agree"]


def test_unknown_route_is_refused():
    with pytest.raises(ConfigError, match="route must be one of"):
        pair().predict_route("human")


def test_expected_latency_speedup_and_break_even_algebra():
    model = pair()
    w = Workload(cot_tokens=300)
    t = model.predict_routes(w)
    assert model.expected_mai(1.0, workload=w) == pytest.approx(t["agree"])
    assert model.expected_mai(0.0, workload=w) == pytest.approx(t["transfer"])
    assert model.expected_mai(0.0, 1.0, workload=w) == pytest.approx(t["extract_agree"])
    half = model.expected_mai(0.5, 0.5, workload=w)
    assert half == pytest.approx(
        0.5 * t["agree"] + 0.25 * t["extract_agree"] + 0.25 * t["transfer"]
    )
    assert model.speedup(0.5, 0.5, w) == pytest.approx(t["large_cot"] / half)
    # The large model reasoning 60 tokens is faster than MAI's transfer of 300 small tokens.
    w2 = Workload(cot_tokens=300, large_cot_tokens=60)
    p = model.break_even(0.0, w2)
    assert 0 < p < 1
    assert model.expected_mai(p, 0.0, w2) == pytest.approx(model.predict_route("large_cot", w2))
    assert model.break_even(0.0, w) == 0.0  # transfer already beats large_cot
    taking_turns = pair(overlap=2.0)  # verification slower than the large model's 1-token CoT
    assert taking_turns.break_even(0.0, Workload(large_cot_tokens=1)) is None
    with pytest.raises(ConfigError, match="agree_rate"):
        model.expected_mai(1.5)


def test_seed_model_is_the_decode_of_the_transfer_route():
    model = LatencyModel.what_if("small=61.8,large=47.3")
    w = Workload(cot_tokens=300, short_tokens=2)
    assert model.seed_estimate(w) == pytest.approx(300 / 61.8 + 2 / 47.3)
    # With only decode speeds, a call of N tokens costs N / speed.
    assert model.predict_route("large_cot", w) == pytest.approx((300 + 2) / 47.3)
    assert model.predict_route("small", w) == pytest.approx(2 / 61.8)


# -- what-if -----------------------------------------------------------------------------------


def test_what_if_from_published_speeds():
    model = LatencyModel.what_if(
        "small=61.8,large=47.3,small_prefill=5000,large_prefill=2000,overlap=0.2"
    )
    assert model.source == "what-if"
    assert model.small.decode_tok_s == pytest.approx(61.8)
    assert model.large.prefill_tok_s == pytest.approx(2000)
    assert model.overlap == 0.2
    assert model.large.ttft(256, image=True) == pytest.approx(1 / 47.3 + 256 / 2000)
    assert parse_what_if(" small=1 , large=2 ,") == {"small": 1.0, "large": 2.0}


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("small=61.8", "large model's decode speed"),
        ("small=61.8,large=47.3,speed=3", "unknown what-if keys"),
        ("small=fast,large=1", "KEY=NUMBER"),
        ("small=0,large=1", "must be positive"),
        ("small=1,large=1,overlap=3", r"in \[0, 2\]"),
        ("small=1,large", "KEY=NUMBER"),
    ],
)
def test_what_if_errors_name_the_fix(spec, match):
    with pytest.raises(ConfigError, match=match):
        LatencyModel.what_if(spec)


# -- JSON --------------------------------------------------------------------------------------


def test_json_round_trip(tmp_path):
    model = pair(overlap=0.7, run_s=0.02, workload=Workload(prompt_tokens=184))
    model.small.fit = {"samples": 30, "median_rel_error": 0.01}
    path = model.save(tmp_path / "sub" / "profile.json")
    again = LatencyModel.load(path)
    assert again == model
    assert again.predict_routes() == model.predict_routes()
    json.loads(path.read_text())


def test_load_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        LatencyModel.load(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="is not a latency model"):
        LatencyModel.load(bad)
    bad.write_text(json.dumps({"small": {"name": "s"}}))
    with pytest.raises(ConfigError, match="decode_token_s|large"):
        LatencyModel.load(bad)


# -- evaluation report -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_eval(tmp_path_factory):
    from mai_graph.eval.datasets import load_dataset
    from mai_graph.eval.runner import run_eval
    from mai_graph.eval.simulate import SimConfig, simulated_pair
    from mai_graph.eval.synthetic import make_synthetic

    folder = tmp_path_factory.mktemp("lat-eval")
    data = load_dataset(make_synthetic(folder / "data", n=40, seed=5))
    cfg = SimConfig(seed=2)
    small, large = simulated_pair(data.samples, cfg)
    run_eval(data.samples, small, large, out_dir=folder / "eval", progress=False,
             concurrency=4, policies=list(POLICIES))  # fmt: skip
    return folder / "eval", cfg


@pytest.mark.slow
def test_report_fills_predictions_from_recorded_token_counts(sim_eval):
    from mai_graph.eval.records import read_records
    from mai_graph.eval.report import build_report, format_table

    out, cfg = sim_eval
    # The simulated pair's costs: prefill per prompt token, decode per token; no cache.
    model = LatencyModel(
        small=EngineProfile(
            name="s",
            call_s=cfg.small_decode_s,
            prefill_token_s=cfg.small_prefill_s,
            decode_token_s=cfg.small_decode_s,
        ),
        large=EngineProfile(
            name="l",
            call_s=cfg.large_decode_s,
            prefill_token_s=cfg.large_prefill_s,
            decode_token_s=cfg.large_decode_s,
        ),
        workload=Workload(image=False, constrained=False),
    )
    report = build_report(read_records(out), latency_model=model.report_predictor())
    checked = 0
    for summary in report["policies"].values():
        for route, r in summary["routes"].items():
            assert r["predicted_latency_s"] == pytest.approx(r["mean_latency_s"], abs=5e-3), route
            checked += 1
    assert checked >= 6
    assert report["latency_model"] == "latency model (measured, modelled)"
    text = format_table(report)
    assert "measured vs modelled" in text and "large_cot" in text


def test_eval_cli_prints_modelled_next_to_measured(sim_eval, tmp_path, capsys):
    out, _ = sim_eval
    path = LatencyModel.what_if("small=250,large=62.5").save(tmp_path / "p.json")
    code = main(["eval", "--report-only", "--out", str(out), "--no-plots",
                 "--latency-model", str(path)])  # fmt: skip
    assert code == EXIT_OK
    printed = capsys.readouterr().out
    assert "per route, measured vs modelled (latency model p.json (what-if, modelled))" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["policies"]["large"]["routes"]["large"]["predicted_latency_s"] > 0
    assert "modelled" in (out / "report.md").read_text()
    assert main(["eval", "--report-only", "--out", str(out), "--no-plots",
                 "--latency-model", str(tmp_path / "missing.json")]) == EXIT_USAGE  # fmt: skip


# -- the profile command (no engines) ----------------------------------------------------------


def test_profile_what_if_prints_modelled_numbers(capsys):
    code = main(["profile", "--what-if", "small=61.8,large=47.3", "--cot-tokens", "300",
                 "--agree-rates", "0.6,0.9"])  # fmt: skip
    assert code == EXIT_OK
    out = capsys.readouterr().out
    assert "what-if deployment" in out
    assert "modelled" in out and "break-even agreement rate (modelled, vs large_cot)" in out
    assert "60%" in out and "90%" in out
    assert "N_S/T_S + N_L'/T_L" in out


def test_profile_json_and_from_file(tmp_path, capsys):
    path = tmp_path / "p.json"
    assert main(["profile", "--what-if", "small=100,large=25", "--out", str(path)]) == EXIT_OK
    capsys.readouterr()
    code = main(["profile", "--from", str(path), "--json", "--cot-tokens", "200",
                 "--large-cot-tokens", "40", "--s2-exit-rate", "0.5"])  # fmt: skip
    assert code == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["source"] == "what-if"
    modelled = data["modelled"]
    assert modelled["workload"]["cot_tokens"] == 200
    assert set(modelled["routes_s"]) == set(MODEL_ROUTES)
    assert 0 < modelled["break_even_agree_rate"] < 1
    assert (
        modelled["mai"]["0.9"]["speedup_vs_large_cot"]
        > modelled["mai"]["0.5"]["speedup_vs_large_cot"]
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--what-if", "small=1"], "large model's decode speed"),
        (["--what-if", "small=1,large=1", "--from", "x.json"], "exclude each other"),
        (["--backend", "fake"], "fake backend has no speed"),
        (["--from", "missing.json"], "not found"),
        (["--what-if", "small=1,large=1", "--agree-rates", "2"], "--agree-rates"),
        (["--what-if", "small=1,large=1", "--s2-exit-rate", "-1"], "--s2-exit-rate"),
        (["--what-if", "small=1,large=1", "--keep-ratio", "0"], "--keep-ratio"),
        (["--backend", "vllm"], "needs both models"),
        (["--tiny", "--backend", "openai"], "--tiny runs on"),
        (["--small", "a", "--large", "b", "--image-size", "12"], "--image-size"),
    ],
)
def test_profile_errors_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["profile", *argv]) == EXIT_USAGE
    assert message in capsys.readouterr().err


# -- profiling, on simulated engines -----------------------------------------------------------


class SimEngine:
    """An engine whose latency is a known EngineProfile, with a prefix cache and image cache."""

    def __init__(self, name, profile):
        self.name, self.profile = name, profile
        self.prompts, self.images = [], set()

    def _tokens(self, request):
        out = []
        for message in request.messages:
            out.append(f"<{message['role']}>")
            if message.get("token_ids"):
                out += [f"#{t}" for t in message["token_ids"]]
                continue
            for part in message["content"]:
                if part["type"] == "image":
                    out += [f"<img:{part['image']['sha256'][:8]}>"] * 64
                elif part.get("token_ids"):
                    out += [f"#{t}" for t in part["token_ids"]]
                else:
                    out += part["text"].split()
        return out

    async def generate(self, request):
        from mai_graph.backends.base import Generation
        from mai_graph.backends.render import common_prefix

        tokens = self._tokens(request)
        cached = max((common_prefix(tokens, p) for p in self.prompts), default=0)
        self.prompts.append(tokens)
        image = request.image
        fresh = image is not None and image["sha256"] not in self.images
        if image is not None:
            self.images.add(image["sha256"])
        n = max(request.min_tokens, 2 if request.choices else 1)
        text = request.choices[0] if request.choices else " ".join(["w"] * n)
        shape = CallTokens(
            "small", "x", len(tokens) - cached, cached, n, fresh, request.choices is not None
        )
        return Generation(
            text=text,
            model=self.name,
            prompt_tokens=len(tokens),
            cached_tokens=cached,
            generated_tokens=n,
            latency_s=self.profile.engine_time(shape),
            token_ids=tuple(range(100, 100 + n)),
            tokens=tuple([text] if request.choices else [" w"] * n),
            logprobs=(-0.1,) * n if request.logprobs is not None else None,
        )


async def test_profile_pair_recovers_a_simulated_pair(tmp_path):
    from mai_graph.latency.profile import profile_pair

    large_true = TRUE.model_copy(update={"decode_token_s": 0.02, "call_s": 0.012})
    small, large = SimEngine("s", TRUE), SimEngine("l", large_true)
    lines = []
    between = []

    async def note(i):
        between.append(i)

    model = await profile_pair(
        small, large, rounds=2, image_size=(64, 48), say=lines.append, between_rounds=note
    )
    assert lines[0] == "warming up ..." and "round 2/2 ..." in lines
    assert between == [0, 1]
    for fitted, true in ((model.small, TRUE), (model.large, large_true)):
        assert fitted.fit["max_rel_error"] < 1e-3
        for name in ("call_s", "decode_token_s", "image_s", "choice_s"):
            assert getattr(fitted, name) == pytest.approx(getattr(true, name), rel=0.02), name
    assert model.overlap == pytest.approx(0.0, abs=1e-3)  # simulated calls never compete
    w = model.workload
    assert w.prompt_tokens > 64 and w.short_tokens == 2
    assert w.reason_uncached < 40 and w.cot_prompt_tokens > w.prompt_tokens
    # The model reproduces a fresh simulated run's critical path, route by route.
    from mai_graph.latency.profile import Fresh, fresh_run

    fresh = Fresh(7, (64, 48))
    for route in ("agree", "extract_agree", "transfer", "small", "large", "large_cot"):
        result = await fresh_run(small, large, fresh, route, tmp_path, cot_tokens=32)
        assert result.route == route
        metrics = result.metrics
        verify = [m["latency_s"] for m in metrics if m["node"] == "verify"]
        measured = max(verify, default=0.0) + sum(
            m["latency_s"] for m in metrics if m["node"] != "verify"
        )
        calls = [SimpleNamespace(**m) for m in metrics]
        assert model.predict_calls(calls) == pytest.approx(measured, rel=0.02, abs=1e-3), route
        workload = w.model_copy(update={"cot_tokens": 32})
        modelled = model.predict_route(route, workload, wall=False)
        assert modelled == pytest.approx(measured, rel=0.05), route
    assert model.notes["rounds"] == 2 and set(model.notes["run_overhead_s"]) == {
        "agree",
        "transfer",
    }


async def test_profile_needs_two_rounds():
    from mai_graph.latency.profile import profile_pair

    with pytest.raises(ConfigError, match="rounds must be at least 2"):
        await profile_pair(SimEngine("s", TRUE), SimEngine("l", TRUE), rounds=1)


def test_recorded_calls_charge_an_image_only_when_it_was_not_cached():
    model = pair(workload=Workload(prompt_cached=32))

    def call(node, role, prompt, cached, generated=2):
        return SimpleNamespace(
            node=node, role=role, prompt_tokens=prompt, cached_tokens=cached,
            generated_tokens=generated,
        )  # fmt: skip

    fresh = model.predict_calls([call("verify", "small", 180, 32)])
    seen = model.predict_calls([call("verify", "small", 180, 96)])
    prefill = model.small.engine_time(CallTokens("small", "x", 148, 32, 2, False, True))
    assert fresh == pytest.approx(prefill + model.small.image_s)
    assert seen < fresh
    # A role's later calls never read a fresh image.
    path = [call("verify", "small", 180, 32), call("reason", "small", 200, 160, 50)]
    reason = model.small.engine_time(CallTokens("small", "reason", 40, 160, 50))
    assert model.predict_calls(path) == pytest.approx(fresh + reason)


def test_the_modelled_routes_are_the_graphs_routes_but_a_reviewers():
    from typing import get_args

    from mai_graph.latency.model import MODEL_ROUTES
    from mai_graph.state import Route

    assert set(MODEL_ROUTES) == set(get_args(Route)) - {"human"}
