"""Calibration on simulated records: the chosen setting holds on the held-out split."""

import pytest

from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.eval import (
    Sample,
    SimConfig,
    calibrate,
    context_file,
    read_records,
    run_eval,
    simulated_pair,
)
from mai_graph.eval.calibrate import Setting, pareto_front, split_samples, wilson_bounds

N = 1200


def _samples(n):
    out = []
    for i in range(n):
        q = f"Question {i}: which one?"
        if i % 2:
            out.append(Sample(id=f"s{i}", question=q, kind="choice", answer="ABCD"[i % 4],
                              options={"A": "w", "B": "x", "C": "y", "D": "z"}))  # fmt: skip
        else:
            out.append(Sample(id=f"s{i}", question=q, kind="number", answer=str(i % 50 + 2)))
    return out


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal")
    samples = _samples(N)
    small, large = simulated_pair(samples, SimConfig(seed=11))
    run_eval(samples, small, large, out_dir=out, policies=["mai", "small", "large_cot"],
             branches=True, concurrency=8, progress=False)  # fmt: skip
    return read_records(out)


@pytest.fixture(scope="module")
def calibrated(records):
    """``calibrate(records, **goal)``, each goal computed once for the module's tests."""
    done = {}

    def result(**goal):
        key = tuple(sorted(goal.items()))
        if key not in done:
            done[key] = calibrate(records, **goal)
        return done[key]

    return result


@pytest.mark.slow
@pytest.mark.parametrize("target", [0.75, 0.8, 0.84])
def test_an_accuracy_target_holds_on_the_held_out_split(calibrated, target):
    result = calibrated(target_accuracy=target)
    assert result.met and result.chosen is not None
    assert result.chosen.accuracy >= target
    assert wilson_bounds(result.chosen.right, result.chosen.n, 0.9)[0] >= target
    assert result.held_out is not None and result.held_out.accuracy >= target
    assert result.held_out_met
    assert result.held_out.n + result.chosen.n == N
    cheaper = [
        s for s in result.curve
        if wilson_bounds(s.right, s.n, 0.9)[0] >= target
        and s.mean_latency_s < result.chosen.mean_latency_s
    ]  # fmt: skip
    assert not cheaper  # the cheapest qualifying setting was chosen


@pytest.mark.slow
def test_a_transfer_budget_holds_on_the_held_out_split(calibrated):
    result = calibrated(max_transfer_share=0.15)
    assert result.chosen is not None and result.chosen.transfer_share <= 0.15
    assert result.held_out.transfer_share <= 0.15 and result.held_out_met
    # The most accurate setting within the budget.
    within = [s for s in result.curve if wilson_bounds(s.transfers, s.n, 0.9)[1] <= 0.15]
    assert result.chosen.accuracy == max(s.accuracy for s in within)


@pytest.mark.slow
def test_gap_recovered_and_the_pareto_front(calibrated):
    result = calibrated(target_accuracy=0.7)
    refs = result.references["calibration"]
    weak, strong = refs["small"], refs["large_cot"]
    for s in result.curve[:20]:
        assert s.gap_recovered == pytest.approx((s.accuracy - weak) / (strong - weak))
    front = pareto_front(result.curve)
    shares = [s.transfer_share for s in front]
    accs = [s.accuracy for s in front]
    assert shares == sorted(shares) and accs == sorted(accs)
    gates = {s.setting.gate for s in result.curve}
    assert gates == {"agree", "agree_confident", "agree_joint", "never"}
    assert {s.setting.s2_exit for s in result.curve} == {True, False}
    assert any(s.setting.large_confident_exit is not None for s in result.curve)


@pytest.mark.slow
def test_the_context_file_loads_and_reproduces_the_choice(calibrated):
    result = calibrated(target_accuracy=0.8)
    fields = context_file(result)
    ctx = MAIContext(**fields)
    for name, value in result.chosen.setting.fields().items():
        if name != "gate_min_prob" or ctx.gate == "agree_confident":
            assert getattr(ctx, name) == value
    assert "policy" not in fields and "answer_kind" not in fields


@pytest.mark.slow
def test_an_unreachable_target_chooses_nothing(calibrated):
    result = calibrated(target_accuracy=0.99)
    assert not result.met and result.chosen is None and result.held_out is None
    with pytest.raises(ConfigError, match="no setting was chosen"):
        context_file(result)


def test_records_without_branches_are_refused(tmp_path):
    samples = _samples(10)
    small, large = simulated_pair(samples)
    run_eval(samples, small, large, out_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="no mai runs recorded with every branch"):
        calibrate(read_records(tmp_path), target_accuracy=0.5)
    with pytest.raises(ConfigError, match="exactly one"):
        calibrate(read_records(tmp_path))


def test_split_is_deterministic_and_disjoint():
    ids = [f"s{i}" for i in range(500)]
    assert split_samples(ids, 0.3, seed=1) == split_samples(ids, 0.3, seed=1)
    cal, held = split_samples(ids, 0.3, seed=1)
    assert sorted(cal + held) == sorted(ids) and 100 < len(cal) < 200
    assert split_samples(ids, 0.3, seed=2) != (cal, held)
    with pytest.raises(ConfigError):
        split_samples(ids, 1.0)


def test_setting_labels():
    assert Setting().label() == "agree, s2 on, keep 0.2"
    assert Setting("never", 0.5, False).label() == "never, s2 off, keep 0.2"


@pytest.mark.slow
def test_calibration_replay_agrees_with_replay_on_every_setting(records):
    from mai_graph.eval import replay
    from mai_graph.eval.calibrate import score_setting, settings_grid
    from mai_graph.eval.replay import Branches

    runs = records.of("mai")[:150]
    branches = [Branches.of(r) for r in runs]
    base = MAIContext()
    for setting in settings_grid(branches)[::7]:
        fast = score_setting(branches, setting, base)
        ctx = base.replace(**setting.fields())
        routes = [replay(r, ctx).route for r in runs]
        assert fast.transfers == routes.count("transfer"), setting
        assert fast.routes == {k: routes.count(k) / len(runs) for k in sorted(set(routes))}
