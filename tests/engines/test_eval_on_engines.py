"""Evaluation on real engines (tiny random-weight pair): records, resume and report plumbing.

The weights are random, so nothing here looks at accuracy values, only at what was recorded.
"""

import math

import pytest

from mai_graph.eval import (
    build_report,
    calibrate,
    load_dataset,
    make_synthetic,
    read_records,
    run_eval,
)

pytestmark = pytest.mark.engine

CONTEXT = {"cot_max_tokens": 24, "short_max_tokens": 8, "s2_max_tokens": 8}


def test_eval_records_every_branch_and_resumes(engines, tmp_path):
    _, small, large = engines
    data = load_dataset(make_synthetic(tmp_path / "data", n=6, seed=1))
    out = tmp_path / "eval"
    kwargs = dict(out_dir=out, policies=["mai", "small", "large_cot"], context=CONTEXT,
                  branches=True, keep_ratios=[0.5], concurrency=3, progress=False)  # fmt: skip
    first = run_eval(data.samples, small, large, **kwargs)
    assert first.done == 18
    records = read_records(out)
    assert records.problems == [] and len(records.runs) == 18
    for run in records.of("mai"):
        nodes = sorted((c.node, c.role, c.keep_ratio) for c in run.calls)
        assert nodes == [("answer", "large", 0.2), ("answer", "large", 0.5),
                         ("extract", "small", None), ("reason", "small", None),
                         ("verify", "large", None), ("verify", "small", None)]  # fmt: skip
        assert all(c.latency_s > 0 and c.prompt_tokens > 20 for c in run.calls)
        reason = next(c for c in run.calls if c.node == "reason")
        assert 0 < reason.generated_tokens <= 24 and reason.text is not None
    large_cot = records.of("large_cot")[0]
    assert [(c.node, c.role) for c in large_cot.calls] == [
        ("reason", "large"),
        ("extract", "large"),
    ]

    again = run_eval(data.samples, small, large, **kwargs)
    assert again.done == 0 and again.skipped == 18

    report = build_report(read_records(out))
    for policy, s in report["policies"].items():
        assert math.isclose(sum(r["share"] for r in s["routes"].values()), 1.0), policy
        rows = [r for r in report["samples"] if r["policy"] == policy]
        assert sum(r["credit"] for r in rows) / len(rows) == pytest.approx(s["accuracy"])
        assert s["latency_s"]["mean"] > 0
    assert report["policies"]["large_cot"]["generated_tokens"]["large"] > 0

    result = calibrate(read_records(out), max_transfer_share=1.0, confidence=0.0)
    assert result.chosen is not None and result.held_out is not None
