"""Evaluation integrity through ``mai-graph eval``: bad images, TSV quoting and prices.

An image that does not decode is a bad row whether it is found when the dataset is read or
while its run reads it: ``--on-bad-row skip`` records it with its reason, counts it in the
report and goes on (a resume does not stop at it); ``fail`` names the row. A stray quote in an
MMBench TSV costs its own row, never the rows after it. ``report.json`` is always valid JSON.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math

import pytest
from PIL import Image

from mai_graph.cli import EXIT_OK, EXIT_USAGE, main
from mai_graph.errors import ConfigError
from mai_graph.eval.cost import MAX_PRICE, Price
from mai_graph.eval.datasets import load_dataset
from mai_graph.eval.report import write_report

QUIET = ["--no-progress", "--no-plots"]


def _png(size=(32, 32), noise=False) -> bytes:
    img = Image.effect_noise(size, 60).convert("RGB") if noise else Image.new("RGB", size, "red")
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def images(tmp_path):
    """A good image, a text file named .png (fails when read) and a truncated PNG (its header
    reads; its pixels fail while the run decodes them)."""
    (tmp_path / "good.png").write_bytes(_png())
    (tmp_path / "notes.png").write_text("just some text\n")
    whole = _png((64, 64), noise=True)
    (tmp_path / "cut.png").write_bytes(whole[: len(whole) // 2])
    return tmp_path


def _jsonl(folder, rows) -> str:
    path = folder / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _row(id_, image):
    return {"id": id_, "question": "Is the shape red?", "answer": "yes", "image": image}


def test_undecodable_images_are_bad_rows_skipped_counted_and_not_redone(images, capsys):
    data = _jsonl(images, [_row("a", "good.png"), _row("text", "notes.png"),
                           _row("cut", "cut.png"), _row("b", "good.png")])  # fmt: skip
    out = images / "out"
    argv = ["eval", "--data", data, "--out", str(out), "--policies", "mai,small", *QUIET]
    assert main(argv) == EXIT_OK
    err = capsys.readouterr().err
    assert "line 2: image" in err and "cannot be decoded" in err  # found when read
    assert "skipped: sample 'cut' (mai): cannot decode image" in err  # found by the run
    assert "4 runs done" in err and "2 runs skipped as bad rows" in err
    report = json.loads((out / "report.json").read_text())
    bad = report["bad_rows"]
    assert bad["count"] == 2 and len(bad["when_read"]) == 1 and "notes.png" in bad["when_read"][0]
    assert {(b["sample"], b["policy"]) for b in bad["at_run"]} == {("cut", "mai"), ("cut", "small")}
    assert all("truncated" in b["reason"] for b in bad["at_run"])
    assert {r["id"] for r in report["samples"]} == {"a", "b"}
    assert "## Bad rows skipped (2)" in (out / "report.md").read_text()

    assert main(argv) == EXIT_OK  # the resume neither stops at the bad row nor redoes it
    err = capsys.readouterr().err
    assert "0 runs done, 6 already recorded" in err and "0 runs skipped" in err
    assert json.loads((out / "report.json").read_text())["bad_rows"]["count"] == 2


def test_an_image_that_fails_during_its_run_fails_the_eval_by_flag(images, capsys):
    data = _jsonl(images, [_row("a", "good.png"), _row("cut", "cut.png")])
    code = main(["eval", "--data", data, "--out", str(images / "out"), "--policies", "small",
                 "--on-bad-row", "fail", *QUIET])  # fmt: skip
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err[-500:]
    assert "bad row: sample 'cut' (policy small): cannot decode image" in err
    assert "--on-bad-row skip" in err and "Traceback" not in err


def test_an_image_that_fails_when_read_fails_the_load_by_flag(images, capsys):
    data = _jsonl(images, [_row("a", "good.png"), _row("text", "notes.png")])
    code = main(["eval", "--data", data, "--out", str(images / "out"), "--on-bad-row", "fail",
                 *QUIET])  # fmt: skip
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "line 2: image" in err and "cannot be decoded" in err


def test_an_undecodable_base64_image_in_a_tsv_is_a_bad_row(tmp_path):
    header = ["index", "question", "A", "B", "answer", "image"]
    broken = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"not a png at all" * 8).decode()
    good = base64.b64encode(_png()).decode()
    path = tmp_path / "mm.tsv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerows([header, ["1", "Which?", "red", "blue", "A", good],
                          ["2", "Which?", "red", "blue", "A", broken]])  # fmt: skip
    data = load_dataset(path)
    assert [s.id for s in data.samples] == ["1"]
    assert [(p.location, "cannot be decoded" in p.message) for p in data.problems] == [(3, True)]


def _mmbench(path, lines):
    b64 = base64.b64encode(_png()).decode()
    path.write_text("index\tquestion\tA\tB\tanswer\timage\n"
                    + "".join(line.replace("IMG", b64) + "\n" for line in lines))  # fmt: skip
    return path


def test_an_unbalanced_quote_in_a_tsv_costs_its_own_row_only(tmp_path, capsys):
    path = _mmbench(tmp_path / "mm.tsv", [
        "1\tWhich colour?\tred\tblue\tA\tIMG",
        '2\t"Which colour, said he?\tred\tblue\tA\tIMG',  # opens a quote it never closes
        "3\tWhich shape?\tround\tsquare\tB\tIMG",
        "4\tWhich size?\tsmall\tlarge\tA\tIMG",
        '5\tThe sign says "STOP"?\tyes\tno\tA\tIMG',  # a later quote: the run would end here
        "6\tHow many?\tone\ttwo\tB\tIMG",
    ])  # fmt: skip
    data = load_dataset(path)
    assert [s.id for s in data.samples] == ["1", "3", "4", "5", "6"]
    assert data.samples[3].question == 'The sign says "STOP"?'
    (problem,) = data.problems
    assert problem.location == 3 and "quote" in problem.message and '""' in problem.message
    code = main(["eval", "--data", str(path), "--out", str(tmp_path / "out"), "--policies",
                 "small", *QUIET])  # fmt: skip
    err = capsys.readouterr().err
    assert code == EXIT_OK and "5 runs done" in err and "1 bad rows skipped when read" in err
    assert json.loads((tmp_path / "out" / "report.json").read_text())["bad_rows"]["count"] == 1


def test_quoted_cells_pandas_writes_still_read_as_one_row(tmp_path):
    """Cells with a line break, a tab or a quote are quoted (as pandas writes MMBench)."""
    b64 = base64.b64encode(_png()).decode()
    path = tmp_path / "mm.tsv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerows([
            ["index", "question", "hint", "A", "B", "answer", "image"],
            ["1", 'Which "colour"?', "Line one.\nLine\ttwo.", "red", "blue", "A", b64],
            ["2", "Which shape?", "", "round", "square", "B", b64],
        ])  # fmt: skip
    data = load_dataset(path)
    assert not data.problems and [s.id for s in data.samples] == ["1", "2"]
    assert data.samples[0].question == 'Hint: Line one.\nLine\ttwo.\nWhich "colour"?'


def test_a_row_with_too_many_cells_is_named(tmp_path):
    path = _mmbench(tmp_path / "mm.tsv", ["1\tWhich?\tred\tblue\tA\tIMG\textra",
                                          "2\tWhich?\tred\tblue\tA\tIMG"])  # fmt: skip
    data = load_dataset(path)
    assert [s.id for s in data.samples] == ["2"]
    assert "7 fields, the header has 6" in data.problems[0].message


@pytest.mark.parametrize("raw", ["1e308,1", "1,1e400", "nan,1", "1,2,inf", f"{MAX_PRICE * 2},1"])
def test_prices_must_be_finite_and_bounded(raw, tmp_path, capsys):
    code = main(["eval", "--report-only", "--out", str(tmp_path), "--price", f"small={raw}"])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "--price small needs" in err and "1,000,000" in err


def test_the_largest_prices_keep_report_json_finite(tmp_path, capsys):
    (tmp_path / "good.png").write_bytes(_png())
    data = _jsonl(tmp_path, [_row("a", "good.png")])
    big = f"{MAX_PRICE:g},{MAX_PRICE:g},{MAX_PRICE:g}"
    code = main(["eval", "--data", data, "--out", str(tmp_path / "out"), "--policies", "mai",
                 "--price", f"small={big}", "--price", f"large={big}", *QUIET])  # fmt: skip
    assert code == EXIT_OK, capsys.readouterr().err[-500:]
    text = (tmp_path / "out" / "report.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    cost = json.loads(text)["policies"]["mai"]["cost"]
    assert math.isfinite(cost["per_1000"]) and cost["per_1000"] > 0


def test_prices_and_reports_refuse_non_finite_numbers_in_python(tmp_path):
    with pytest.raises(ConfigError, match="price prompt must be a number from 0") as err:
        Price(1e308, 1.0)
    assert err.value.parameter == "--price"
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_report({"latency": math.inf}, tmp_path, plots=False)
