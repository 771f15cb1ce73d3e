"""Reading against copying: the masked transfer, transfer gain, copy rate, tokens and cost.

The large fake below *copies* a stated answer when it reads one and otherwise keeps its own;
it never reasons. The evaluation must say so: with the full reasoning its transfer answers copy
the small model, with the stated answer masked they keep its own answer, and the gain
vanishes. Driven through ``mai-graph eval`` (CLI) and ``run_eval`` (Python).
"""

from __future__ import annotations

import json
import re

import pytest
from PIL import Image

from mai_graph.backends.fake import FunctionBackend
from mai_graph.cli import main
from mai_graph.errors import ConfigError
from mai_graph.eval import build_report, load_dataset, read_records, run_eval
from mai_graph.eval.cost import parse_prices
from mai_graph.eval.transfer import copy_source
from mai_graph.scoring.mask import answer_statement

N = 12


def _text(request) -> str:
    return "\n".join(
        p["text"] for m in request.messages for p in m["content"] if p["type"] == "text"
    )


def _gold(request) -> int:
    return int(re.search(r"Question: Item (\d+):", _text(request)).group(1))


def _small(request):
    i = _gold(request)
    if request.purpose == "short":
        return "0"  # always disagrees with the large model
    if request.purpose == "cot":
        # a right reasoning on even items, a wrong one on odd items
        said = i if i % 2 == 0 else i + 100
        return f"I count the things one by one and find {said} of them. Answer: {said}"
    if request.purpose == "s2":
        found = re.findall(r"Answer: (\d+)", _text(request))
        return found[-1] if found else "0"
    raise AssertionError(request.purpose)


def _large(request):
    if request.purpose in ("short", "answer"):
        text = _text(request)
        if request.purpose == "answer":
            stated = re.findall(r"Answer: ?(\d+)", text.split("Question:")[-1] + text)
            if stated:
                return stated[-1]  # copies whatever answer it reads
        return "1"  # its own short answer: wrong
    raise AssertionError(request.purpose)


@pytest.fixture()
def data(tmp_path):
    Image.new("RGB", (32, 32), "white").save(tmp_path / "p.png")
    rows = [{"id": f"s{i}", "image": "p.png", "question": f"Item {i}: how many things?",
             "answer": str(i), "kind": "number"} for i in range(2, 2 + N)]  # fmt: skip
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _pair():
    return FunctionBackend(_small, name="small"), FunctionBackend(_large, name="large")


def test_masked_transfer_separates_copying_from_reading(data, tmp_path):
    small, large = _pair()
    out = tmp_path / "ev"
    run_eval(load_dataset(data).samples, small, large, out_dir=out, policies=["mai"],
             branches=True, transfer_variants=["full", "masked"], progress=False,
             context={"sparsify": "none"})  # fmt: skip
    records = read_records(out)
    assert records.sessions[0].transfer_variants == ["full", "masked"]
    answers = [c for run in records.of("mai") for c in run.calls if c.node == "answer"]
    assert {c.variant for c in answers} == {"masked", None}
    masked = [c for c in answers if c.variant == "masked"]
    assert all("Answer" not in (c.transfer or "") for c in masked)
    assert all(c.sparsify["masked_tokens"] > 0 for c in masked)
    t = build_report(records)["policies"]["mai"]["transfer"]
    full, hidden = t["transferred"], t["masked"]
    assert full["n"] == hidden["n"] == N
    # full: the large model copies the small one's stated answer, right on even items
    assert full["copy"]["small"] == 1.0 and full["transfer_accuracy"] == 0.5
    assert full["large_short_accuracy"] == 0.0 and full["gain"] == 0.5
    # masked: nothing to copy, it keeps its own (wrong) answer: the gain was copying
    assert hidden["copy"]["large"] == 1.0 and hidden["gain"] == 0.0
    assert t["disagreements"]["full"]["n"] == N


def test_eval_cli_reports_transfer_tokens_and_cost(data, tmp_path, monkeypatch, capsys):
    import mai_graph.cli.eval as cli

    monkeypatch.setattr(cli, "_backends", lambda args, samples, context=None: _pair())
    out = tmp_path / "cli"
    code = main(["eval", "--data", str(data), "--out", str(out), "--policies", "mai,large",
                 "--branches", "--transfer-variants", "full,masked", "--no-progress",
                 "--price", "small=1,2", "--price", "large=10,20,1"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "reasoning transfer" in printed and "masked" in printed
    assert "per 1,000 questions" in printed and "inputs, not measured" in printed
    report = json.loads((out / "report.json").read_text())
    mai = report["policies"]["mai"]
    assert mai["reasoning_tokens"]["small"] > 0 and mai["reasoning_tokens"]["large"] == 0
    assert mai["answer_tokens"]["large"] >= 1
    assert mai["cost"]["per_1000"] == pytest.approx(1000 * mai["cost"]["per_question"])
    assert report["policies"]["large"]["cost"]["per_question"] > 0
    assert report["prices"]["large"] == {"prompt": 10.0, "generated": 20.0, "cached": 1.0}
    assert (out / "accuracy_cost.png").is_file()
    md = (out / "report.md").read_text()
    assert "## Reasoning transfer" in md and "## Tokens and cost" in md
    # the report is rebuilt from records alone, prices given again
    assert main(["eval", "--report-only", "--out", str(out), "--no-plots"]) == 0


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--price", "medium=1,2"], "small or large"),
        (["--price", "small=1"], "two or three"),
        (["--price", "small=1,-2"], "from 0 to 1,000,000"),
        (["--price", "small=1,nan"], "from 0 to 1,000,000"),
        (["--price", "small=1,inf"], "from 0 to 1,000,000"),
        (["--price", "small=a,b"], "two or three"),
        (["--price", "small=1,2", "--price", "small=3,4"], "twice"),
        (["--price", "small"], "ROLE=IN,OUT"),
        (["--transfer-variants", "full,half"], "transfer variants"),
        (["--transfer-variants", "masked"], "--branches"),
    ],
)
def test_bad_transfer_and_price_flags_are_refused_before_any_run(data, tmp_path, argv, needle,
                                                                  capsys):  # fmt: skip
    out = tmp_path / "bad"
    code = main(["eval", "--data", str(data), "--backend", "oracle", "--out", str(out),
                 "--no-progress", *argv])  # fmt: skip
    assert code == 2
    assert needle in capsys.readouterr().err
    assert not (out / "records.jsonl").exists()


def test_resume_with_other_transfer_variants_is_refused(data, tmp_path):
    small, large = _pair()
    samples = load_dataset(data).samples
    out = tmp_path / "ev"
    run_eval(samples[:2], small, large, out_dir=out, policies=["mai"], branches=True,
             progress=False)  # fmt: skip
    with pytest.raises(ConfigError, match="transfer_variants"):
        run_eval(samples, small, large, out_dir=out, policies=["mai"], branches=True,
                 transfer_variants=["full", "masked"], progress=False)  # fmt: skip


@pytest.mark.parametrize(
    "pieces, answer, expected",
    [
        (["I", " see", " 3", ".", " Answer", ":", " 3"], None, [4, 5, 6]),
        (["The", " answer", " is", " B", "."], None, [1, 2, 3, 4]),
        (["Final", " answer", ":", " yes"], None, [0, 1, 2, 3]),
        (["FINAL ANSWER", " no"], None, [0, 1]),
        ([" \\boxed{", "42", "}"], None, [0, 1, 2]),
        (["Answer", ": 1", ". Wait", ", answer", ": 2"], None, [3, 4]),  # the last cue
        (["it", " is", " blue", ",", " surely", " blue", "."], "blue", [5]),  # the last one
        (["bluebell", " flowers"], "blue", []),  # whole words only
        (["nothing", " here"], None, []),
        ([], "x", []),
        (["answers", " vary"], None, []),
        (["An", "swer", ":", " 4"], None, [0, 1, 2, 3]),  # a cue split over pieces
    ],
)
def test_answer_statement(pieces, answer, expected):
    assert answer_statement(pieces, answer) == expected


def test_copy_source_and_prices():
    assert copy_source("", "", "") == "neither"
    assert copy_source(None, "a", "b") == "neither"
    assert copy_source(" a ", "a", "b") == "small"
    prices = parse_prices(["small=0.1,0.4"])
    assert prices["small"].of(1000, 400, 10) == pytest.approx((600 * 0.1 + 400 * 0.1 + 4) / 1e6)
    assert parse_prices(["large=1,2,0"])["large"].of(10, 99, 0) == 0.0  # cached capped at prompt
