"""Runner, resume and report invariants, on the simulated pair (offline, fast)."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.eval import (
    SimConfig,
    build_report,
    load_dataset,
    make_synthetic,
    read_records,
    replay,
    run_eval,
    simulated_pair,
    write_report,
)
from mai_graph.eval.records import RECORDS_FILE
from mai_graph.eval.replay import outcome
from mai_graph.eval.runner import POLICIES
from mai_graph.eval.scorers import score


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return load_dataset(make_synthetic(tmp_path_factory.mktemp("data"), n=60, seed=7))


@pytest.fixture(scope="module")
def full_report(dataset, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    small, large = simulated_pair(dataset.samples, SimConfig(seed=3))
    run_eval(dataset.samples, small, large, out_dir=out, policies=POLICIES, branches=True,
             keep_ratios=[0.5], concurrency=4, progress=False)  # fmt: skip
    records = read_records(out)
    report = build_report(records)
    return out, records, report


@pytest.mark.slow
def test_route_shares_sum_to_one_and_counts_to_n(full_report, dataset):
    _, _, report = full_report
    assert set(report["policies"]) == set(POLICIES)
    for s in report["policies"].values():
        assert s["n"] == len(dataset)
        assert math.isclose(sum(r["share"] for r in s["routes"].values()), 1.0)
        assert sum(r["n"] for r in s["routes"].values()) == s["n"]
        assert all(r["predicted_latency_s"] is None for r in s["routes"].values())
        assert sum(m["n"] for m in s["by_kind"].values()) == s["n"]
    assert report["policies"]["small"]["routes"].keys() == {"small"}
    assert report["policies"]["mai"]["routes"].keys() <= {"agree", "extract_agree", "transfer"}
    assert report["latency_model"] is None


def test_per_sample_verdicts_recompute_to_the_reported_accuracy(full_report, dataset):
    _, _, report = full_report
    rows = report["samples"]
    options = {s.id: s.options for s in dataset.samples}
    for policy, s in report["policies"].items():
        mine = [r for r in rows if r["policy"] == policy]
        assert len(mine) == s["n"]
        assert sum(r["credit"] for r in mine) / len(mine) == pytest.approx(s["accuracy"])
        for row in mine:
            verdict = score(row["answer"], row["gold"], row["kind"], options[row["id"]])
            assert verdict.correct == row["correct"] and verdict.credit == row["credit"]
            assert verdict.prediction == row["prediction"]
        yes_no = [r for r in mine if r["kind"] == "yes_no"]
        pope = s["by_kind"]["yes_no"]
        assert pope["accuracy"] == pytest.approx(sum(r["credit"] for r in yes_no) / len(yes_no))


def test_questions_with_several_human_answers_score_by_vqa_accuracy(tmp_path):
    rows = [
        {"id": "four", "question": "What colour?", "answer": ["red"] * 4 + ["maroon"] * 6},
        {"id": "three", "question": "What colour is the car?",
         "answer": ["red"] * 3 + ["blue"] * 2 + ["x"]},
        {"id": "two", "question": "What animal?", "answer": ["dog", "dog", "cat", "fox"]},
        {"id": "plain", "question": "What shape?", "answer": "circle"},
    ]  # fmt: skip
    data_file = tmp_path / "vqa.jsonl"
    data_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_dataset(data_file)
    small, large = simulated_pair(data.samples, SimConfig.oracle())
    run_eval(data.samples, small, large, out_dir=tmp_path / "out", policies=["small", "mai"],
             progress=False)  # fmt: skip
    records = read_records(tmp_path / "out")
    assert records.runs[("mai", "four")].record.references == rows[0]["answer"]
    report = build_report(records)
    credits = {r["id"]: r["credit"] for r in report["samples"] if r["policy"] == "mai"}
    # the oracle answers the most given answer: "maroon" (6 of 10), "red" (3 of 6: three
    # leave-one-outs at 2/3, three at 1), "dog" (2 of 4: two at 1/3, two at 2/3)
    assert credits == pytest.approx({"four": 1.0, "three": 5 / 6, "two": 0.5, "plain": 1.0})
    mai = report["policies"]["mai"]
    assert mai["accuracy"] == pytest.approx(sum(credits.values()) / 4)
    assert mai["by_kind"]["text"]["vqa_accuracy"] == pytest.approx(mai["accuracy"])
    assert "exact_match" not in mai["by_kind"]["text"]
    markdown = write_report(report, tmp_path / "report", plots=False)["report.md"].read_text()
    assert f"vqa_accuracy {mai['accuracy']:.3f}" in markdown


def test_speedup_tokens_and_gap_recovered(full_report):
    _, _, report = full_report
    p = report["policies"]
    assert p["large_cot"]["speedup_vs_large_cot"] == pytest.approx(1.0)
    assert p["mai"]["speedup_vs_large_cot"] > 1
    assert p["large_cot"]["large_beyond_short"] == 1.0 and p["large"]["large_beyond_short"] == 0
    assert p["small"]["generated_tokens"]["large"] == 0
    mai = p["mai"]
    assert mai["large_beyond_short"] == pytest.approx(
        mai["routes"].get("transfer", {}).get("share", 0)
    )
    cq = report["cost_quality"]
    assert (cq["weak"], cq["strong"]) == ("small", "large_cot")
    w, s, m = (p[k]["accuracy"] for k in ("small", "large_cot", "mai"))
    assert cq["gap_recovered"] == pytest.approx((m - w) / (s - w))
    assert cq["curve"] and any(c["pareto"] for c in cq["curve"])
    assert {c["setting"]["keep_ratio"] for c in cq["curve"]} == {0.2, 0.5}


def test_report_files(full_report, tmp_path):
    _, records, report = full_report
    written = write_report(report, tmp_path)
    assert {"report.json", "report.md", "accuracy_latency.png", "routes.png", "tokens.png",
            "gap_curve.png"} <= set(written)  # fmt: skip
    for name, path in written.items():
        if name.endswith(".png"):
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["policies"]["mai"]["accuracy"] == report["policies"]["mai"]["accuracy"]
    md = (tmp_path / "report.md").read_text()
    assert "| mai * |" in md and "![MAI routes](routes.png)" in md and "predicted ms" in md


@pytest.mark.slow
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"gate": "agree_confident", "gate_min_prob": 0.7, "s2_exit": False},
        {"large_confident_exit": 0.8},
        {"gate": "never", "s2_exit": False},
        {"keep_ratio": 0.5},
    ],
    ids=["paper", "confident-no-s2", "large-confident", "never", "keep-0.5"],
)
def test_replay_matches_live_runs(full_report, dataset, tmp_path, settings):
    _, records, _ = full_report
    small, large = simulated_pair(dataset.samples, SimConfig(seed=3))
    ctx = MAIContext(**settings)
    run_eval(dataset.samples, small, large, out_dir=tmp_path, context=ctx, progress=False)
    live = read_records(tmp_path)
    for sample in dataset.samples:
        got = outcome(live.runs["mai", sample.id])
        again = replay(records.runs["mai", sample.id], ctx)
        assert (again.route, again.canonical) == (got.route, got.canonical), sample.id
        # Simulated model time is exact; sparsification's scoring time is measured, in each
        # run on its own (so it may differ by as much as the two measurements on a busy machine).
        scoring = sum(float((c.sparsify or {}).get("scoring_s") or 0.0)
                      for r in (live, records) for c in r.runs["mai", sample.id].calls)  # fmt: skip
        assert again.latency_s == pytest.approx(got.latency_s, abs=scoring + 1e-3)
        assert again.generated == got.generated


@pytest.mark.slow
def test_resume_after_a_killed_run_redoes_nothing(dataset, tmp_path):
    data = dataset.path
    script = textwrap.dedent(
        f"""
        from mai_graph.eval import SimConfig, load_dataset, run_eval, simulated_pair
        data = load_dataset({str(data)!r})
        small, large = simulated_pair(data.samples, SimConfig(seed=3, sleep=1.0))
        run_eval(data.samples, small, large, out_dir={str(tmp_path)!r},
                 policies=["mai", "small"], concurrency=3, progress=False)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=os.getcwd())
    path = tmp_path / RECORDS_FILE
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().count('"type":"sample"') >= 8:
                break
            assert proc.poll() is None, "the evaluation ended before it was killed"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    before = read_records(tmp_path)
    finished = set(before.runs)
    assert 8 <= len(finished) < 2 * len(dataset)

    redone = []
    small, large = simulated_pair(dataset.samples, SimConfig(seed=3))
    summary = run_eval(
        dataset.samples, small, large, out_dir=tmp_path, policies=["mai", "small"],
        progress=False, on_run=lambda p, s, ok: redone.append((p, s.id)),
    )  # fmt: skip
    assert not set(redone) & finished
    assert summary.skipped == len(finished) and summary.done == len(redone)
    after = read_records(tmp_path)
    assert set(after.runs) == {(p, s.id) for p in ("mai", "small") for s in dataset.samples}
    for key in finished:  # the records of finished runs are untouched
        assert after.runs[key].record == before.runs[key].record
    again = run_eval(dataset.samples, small, large, out_dir=tmp_path, policies=["mai", "small"],
                     progress=False)  # fmt: skip
    assert again.done == 0


def test_a_crash_mid_write_loses_only_the_run_being_written(dataset, tmp_path):
    small, large = simulated_pair(dataset.samples, SimConfig(seed=3))
    samples = dataset.samples[:10]
    run_eval(samples, small, large, out_dir=tmp_path, progress=False)
    path = tmp_path / RECORDS_FILE
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # the last completion line, cut short
    before = read_records(tmp_path)
    assert len(before.runs) == 9 and "partial last line" in before.problems[0]
    redone = []
    run_eval(samples, small, large, out_dir=tmp_path, progress=False,
             on_run=lambda p, s, ok: redone.append(s.id))  # fmt: skip
    assert redone == [samples[-1].id]
    assert len(read_records(tmp_path).runs) == 10


def test_records_of_other_settings_or_data_are_refused(dataset, tmp_path):
    small, large = simulated_pair(dataset.samples, SimConfig(seed=3))
    samples = dataset.samples[:3]
    run_eval(samples, small, large, out_dir=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="other settings.*keep_ratio"):
        run_eval(samples, small, large, out_dir=tmp_path, context={"keep_ratio": 0.5},
                 progress=False)  # fmt: skip
    changed = [samples[0].model_copy(update={"answer": "9"}), *samples[1:]]
    with pytest.raises(ConfigError, match="different dataset row"):
        run_eval(changed, small, large, out_dir=tmp_path, progress=False)


def test_bad_arguments(dataset, tmp_path):
    small, large = simulated_pair(dataset.samples)
    with pytest.raises(ConfigError, match="policies must be among"):
        run_eval(dataset.samples, small, large, out_dir=tmp_path, policies=["fast"])
    with pytest.raises(ConfigError, match="keep_ratios need branches"):
        run_eval(dataset.samples, small, large, out_dir=tmp_path, keep_ratios=[0.5])
    with pytest.raises(ConfigError, match="concurrency"):
        run_eval(dataset.samples, small, large, out_dir=tmp_path, concurrency=0)


def test_drafters_and_chains_are_evaluated_live_and_refused_for_replay(dataset, tmp_path):
    (s1, l1), (s2, l2) = (simulated_pair(dataset.samples, SimConfig(seed=k)) for k in (3, 4))
    s2.name, l2.name = "sim-small-2", "sim-large-2"
    samples = dataset.samples[:12]
    summary = run_eval(samples, [s1, s2], [l1, l2], out_dir=tmp_path / "shape",
                       policies=["mai", "large"], progress=False)  # fmt: skip
    assert summary.done == 24
    records = read_records(tmp_path / "shape")
    assert records.sessions[0].models == {
        "small": f"{s1.name}, sim-small-2",
        "large": f"{l1.name}, sim-large-2",
    }
    calls = [c for (policy, _), run in records.runs.items() if policy == "mai" for c in run.calls]
    assert {c.drafter for c in calls if c.node == "verify" and c.role == "small"} == {0, 1}
    assert {c.stage for c in calls} == {1, 2}  # the chain's second stage ran on some samples
    assert {c.node for c in calls if c.stage == 2} >= {"escalate", "answer"}
    report = build_report(records)
    assert report["policies"]["mai"]["n"] == len(samples)
    with pytest.raises(ConfigError, match="branches replay two-model runs"):
        run_eval(samples, [s1, s2], l1, out_dir=tmp_path / "b", branches=True, progress=False)
    with pytest.raises(ConfigError, match="large must be a backend or a non-empty sequence"):
        run_eval(samples, s1, [], out_dir=tmp_path / "c", progress=False)


def test_records_of_drafters_and_chain_stages_carry_each_calls_own_text(tmp_path):
    """Each call record holds what that call wrote, not the final state's one text per key."""
    from PIL import Image

    from mai_graph.backends.fake import FunctionBackend

    Image.new("RGB", (32, 32), "white").save(tmp_path / "p.png")
    rows = [{"id": f"q{i}", "image": "p.png", "question": f"Question {i}: how many?",
             "answer": "7", "kind": "number"} for i in range(3)]  # fmt: skip
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def model(name, short):
        def fn(request):
            if request.purpose == "cot":
                return f"{name} reasons. Answer: {short}"
            return short

        return FunctionBackend(fn, name=name)

    drafters = [model("draft-a", "1"), model("draft-b", "2")]
    chain = [model("mid", "3"), model("top", "4")]
    out = tmp_path / "ev"
    run_eval(load_dataset(data).samples, drafters, chain, out_dir=out, policies=["mai"],
             progress=False)  # fmt: skip
    for run in read_records(out).of("mai"):
        texts = {(c.node, c.model, c.stage): c.text for c in run.calls}
        assert texts[("verify", "draft-a", 1)] == "1" and texts[("extract", "draft-a", 1)] == "1"
        assert texts[("verify", "draft-b", 1)] == "2" and texts[("extract", "draft-b", 1)] == "2"
        assert texts[("escalate", "top", 2)] == "4" and texts[("extract", "mid", 2)] == "3"
        canon = {(c.node, c.model): c.canonical for c in run.calls if c.node == "verify"}
        assert canon[("verify", "draft-a")] == "1" and canon[("verify", "draft-b")] == "2"
        reasons = [c for c in run.calls if c.node == "reason"]
        assert reasons and all(c.text.startswith(c.model) for c in reasons)
        answers = {c.stage: c for c in run.calls if c.node == "answer"}
        assert answers[1].model == "mid" and answers[1].text == "3"
        assert answers[2].model == "top" and answers[2].text == "4"
