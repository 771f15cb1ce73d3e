"""The harness validated against the simulated pair: measured values match the configuration."""

import math

import pytest

from mai_graph.errors import BackendError, ConfigError
from mai_graph.eval import (
    Sample,
    SimConfig,
    build_report,
    expected,
    load_dataset,
    make_synthetic,
    read_records,
    run_eval,
    simulated_pair,
)
from mai_graph.eval.runner import POLICIES
from mai_graph.eval.scorers import score

N = 1000


def _samples(n):
    """Image-free samples of every kind (the simulation keys on question and image)."""
    out = []
    for i in range(n):
        kind = ("choice", "yes_no", "number", "text")[i % 4]
        q = f"Question {i} about the picture?"
        if kind == "choice":
            opts = {"A": "red", "B": "green", "C": "blue", "D": "yellow"}
            out.append(Sample(id=f"s{i}", question=q, kind=kind, answer="ABCD"[i % 3],
                              options=opts))  # fmt: skip
        elif kind == "yes_no":
            out.append(Sample(id=f"s{i}", question=q, kind=kind, answer=("yes", "no")[i % 2]))
        elif kind == "number":
            out.append(Sample(id=f"s{i}", question=q, kind=kind, answer=str(3 + i % 40)))
        else:
            out.append(Sample(id=f"s{i}", question=q, kind=kind, answer="purple"))
    return out


def _within(measured, wanted, sd, k=4.0):
    """Within k standard deviations of sampling error (fixed seeds: deterministic)."""
    assert abs(measured - wanted) <= k * sd, (measured, wanted, sd)


def test_oracle_scores_one_on_every_policy(tmp_path):
    data = load_dataset(make_synthetic(tmp_path / "data", n=25))
    small, large = simulated_pair(data.samples, SimConfig.oracle())
    run_eval(data.samples, small, large, out_dir=tmp_path / "out", policies=POLICIES,
             progress=False)  # fmt: skip
    report = build_report(read_records(tmp_path / "out"))
    for policy, summary in report["policies"].items():
        assert summary["accuracy"] == 1.0, policy
    routes = report["policies"]["mai"]["routes"]
    stages = routes["agree"].pop("stages_s")  # the simulated engines' modelled stages
    assert routes == {
        "agree": {"n": 25, "share": 1.0, "mean_latency_s": pytest.approx(
            report["policies"]["mai"]["latency_s"]["mean"]), "predicted_latency_s": None}
    }  # fmt: skip
    assert stages["queue_s"] == 0.0 and stages["prefill_s"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        SimConfig(),
        SimConfig(small=0.5, large=0.75, small_cot=0.6, transfer=0.7, error_correlation=0.0,
                  shared_mistake=0.0, seed=1),
        SimConfig(small=0.7, large=0.7, small_cot=0.8, transfer=0.9, error_correlation=0.9,
                  shared_mistake=1.0, seed=2),
    ],
    ids=["default", "independent", "correlated"],
)  # fmt: skip
def test_measured_accuracy_and_routes_match_the_configuration(tmp_path, config):
    samples = _samples(N)
    small, large = simulated_pair(samples, config)
    run_eval(samples, small, large, out_dir=tmp_path, concurrency=8, progress=False)
    records = read_records(tmp_path)
    report = build_report(records)
    want = expected(samples, config)
    mai = report["policies"]["mai"]
    _within(mai["accuracy"], want["accuracy"]["mai"], want["mai_accuracy_sd"])
    for route, share in want["routes"].items():
        measured = mai["routes"].get(route, {"share": 0.0})["share"]
        _within(measured, share, math.sqrt(share * (1 - share) / N))
    # Each model's short answers (both are recorded by verification) match their accuracy.
    by_sample = {s.id: s for s in samples}
    for role in ("small", "large"):
        p = want["accuracy"][role]
        right = 0
        for run in records.of("mai"):
            call = next(c for c in run.calls if c.node == "verify" and c.role == role)
            s = by_sample[run.record.sample]
            right += score(call.text, s.answer, s.kind, s.options).correct
        _within(right / N, p, math.sqrt(p * (1 - p) / N))


def test_error_correlation_changes_what_the_models_agree_on():
    samples = _samples(200)
    free = expected(samples, SimConfig(error_correlation=0.0))
    tied = expected(samples, SimConfig(error_correlation=1.0))
    assert tied["routes"]["agree"] > free["routes"]["agree"]


@pytest.mark.slow
def test_answers_are_deterministic_and_probabilities_informative():
    samples = _samples(400)
    config = SimConfig(seed=5)
    runs = []
    for _ in range(2):
        small, large = simulated_pair(samples, config)
        from mai_graph import run

        runs.append([run(s.question, small=small, large=large, options=s.options,
                         answer_kind=s.kind, policy="small") for s in samples])  # fmt: skip
    assert [r.answer for r in runs[0]] == [r.answer for r in runs[1]]
    right, wrong = [], []
    for s, r in zip(samples, runs[0]):
        prob = r.metrics[0]["answer_prob"]
        (right if score(r.answer, s.answer, s.kind, s.options).correct else wrong).append(prob)
    assert min(right) >= config.right_prob[0] - 1e-9
    assert max(wrong) <= config.wrong_prob[1] + 1e-9
    assert sum(right) / len(right) > sum(wrong) / len(wrong) + 0.2


def test_unknown_question_and_bad_settings():
    small, _ = simulated_pair(_samples(4))
    from mai_graph import run

    with pytest.raises(BackendError, match="not in its dataset"):
        run("Something else?", small=small, large=small)
    with pytest.raises(ConfigError, match="small must be a probability"):
        SimConfig(small=1.5)
    with pytest.raises(ConfigError, match="--sim needs FIELD=VALUE"):
        SimConfig.parse(["nope=1"])
    assert SimConfig.parse(["small=0.3", "sleep=0.5"]).small == 0.3


@pytest.mark.parametrize("gold", ["12%", "1,987", "1987", "7:45", "2024-03-01", "3.5", "-4"])
def test_simulated_wrong_numbers_are_wrong_for_every_gold_form(gold):
    from mai_graph.answers import match_gold
    from mai_graph.eval.datasets import Sample
    from mai_graph.eval.simulate import _wrong_answers

    wrong = _wrong_answers(Sample(id="x", question="q", kind="number", answer=gold))
    assert wrong and not any(match_gold(w, gold, "number") for w in wrong)


@pytest.mark.slow
def test_expected_accuracy_accounts_for_vqa_credits(tmp_path):
    """Questions whose human answers rarely agree: a right answer earns 5/6, not 1."""
    samples = [
        Sample(
            id=f"v{i}",
            question=f"What colour is thing {i}?",
            kind="text",
            answer="red",
            references=["red"] * 3 + ["blue"] * 2 + ["pink"],
        )  # fmt: skip
        for i in range(400)
    ]
    config = SimConfig(seed=5)
    want = expected(samples, config)
    assert want["accuracy"]["large"] == pytest.approx(config.large * 5 / 6)
    small, large = simulated_pair(samples, config)
    run_eval(samples, small, large, out_dir=tmp_path, policies=["large", "mai"], concurrency=8,
             progress=False)  # fmt: skip
    report = build_report(read_records(tmp_path))
    _within(report["policies"]["mai"]["accuracy"], want["accuracy"]["mai"],
            want["mai_accuracy_sd"])  # fmt: skip
    p = config.large
    _within(report["policies"]["large"]["accuracy"], want["accuracy"]["large"],
            5 / 6 * math.sqrt(p * (1 - p) / len(samples)))  # fmt: skip
    # a wrong answer never matches a human answer: credits are 0 or 5/6
    credits = {round(r["credit"], 6) for r in report["samples"]}
    assert credits <= {0.0, round(5 / 6, 6)}
