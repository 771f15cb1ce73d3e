"""The harness's own check: the oracle scores 1.0 on every row shape ``eval`` reads.

The oracle backend answers from the dataset's gold answers; a score below 1.0 means the
harness matched a request to the wrong row. Rows that share a last line (MMBench hints), a
question text, an image, or options that are substrings of other rows' are the shapes where a
loose match goes wrong. Run through the CLI, as a user runs it.
"""

from __future__ import annotations

import base64
import csv
import io
import json

import pytest
from PIL import Image

from mai_graph.cli import main
from mai_graph.errors import ConfigError
from mai_graph.eval.datasets import load_dataset


def _png(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), colour).save(buf, format="PNG")
    return buf.getvalue()


def _b64(colour) -> str:
    return base64.b64encode(_png(colour)).decode()


def _tsv(path, header, rows):
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _oracle(tmp_path, data, *extra):
    out = tmp_path / "out"
    code = main(["eval", "--data", str(data), "--backend", "oracle", "--out", str(out),
                 "--policies", "mai,small,large,small_cot,large_cot", "--no-progress",
                 "--no-plots", *extra])  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    return {p: s["accuracy"] for p, s in report["policies"].items()}, report


def test_mmbench_rows_with_hints_that_share_a_question(tmp_path):
    red, blue = _b64("red"), _b64("blue")
    header = ["index", "question", "hint", "A", "B", "C", "D", "answer", "image"]
    rows = [
        # the same last line, with and without hints, on one image and on two
        ["1", "Which option is right?", "", "a", "b", "c", "d", "A", red],
        ["2", "Which option is right?", "The map shows a river.", "a", "b", "c", "d", "B", "1"],
        ["3", "Which option is right?", "The map shows a lake.", "a", "b", "c", "d", "C", "1"],
        ["4", "Which option is right?", "The map shows a river.", "a", "b", "c", "d", "D", blue],
        # a hint that is itself another row's question
        ["5", "Which option is right?", "Which option is right?", "w", "x", "", "", "B", red],
        # a question that is a prefix of another's
        ["6", "What is shown", "", "cat", "dog", "", "", "A", red],
        ["7", "What is shown here?", "", "cat", "dog", "", "", "B", red],
        # options that contain another row's options
        ["8", "Pick one.", "", "cat", "dog", "", "", "A", blue],
        ["9", "Pick one.", "", "cat", "dog", "cow", "", "C", blue],
        # a multi-line hint
        ["10", "Which option is right?", "Line one.\nLine two.", "a", "b", "c", "", "C", red],
    ]
    path = _tsv(tmp_path / "mmbench.tsv", header, rows)
    scores, _ = _oracle(tmp_path, path)
    assert scores == dict.fromkeys(scores, 1.0) and len(scores) == 5


def test_mmbench_with_hints_under_circular_evaluation(tmp_path):
    red = _b64("red")
    header = ["index", "question", "hint", "A", "B", "C", "answer", "image"]
    rows = [
        ["1", "Which?", "Hint one.", "cat", "dog", "fox", "B", red],
        ["2", "Which?", "Hint two.", "cat", "dog", "fox", "C", "1"],
        ["3", "Which?", "", "cat", "dog", "fox", "A", "1"],
    ]
    path = _tsv(tmp_path / "mmbench.tsv", header, rows)
    scores, report = _oracle(tmp_path, path, "--circular")
    assert scores == dict.fromkeys(scores, 1.0)
    choice = report["policies"]["mai"]["by_kind"]["choice"]
    assert choice["circular_accuracy"] == 1.0 and choice["circular_questions"] == 3


def test_jsonl_rows_with_multiline_questions_and_shared_images(tmp_path):
    (tmp_path / "a.png").write_bytes(_png("red"))
    (tmp_path / "b.png").write_bytes(_png("green"))
    rows = [
        {"id": "1", "image": "a.png", "question": "Context: a farm.\nHow many cows?",
         "answer": "3"},
        {"id": "2", "image": "a.png", "question": "How many cows?", "answer": "4"},
        {"id": "3", "image": "b.png", "question": "How many cows?", "answer": "5"},
        {"id": "4", "image": "b.png", "question": "Is it red?", "answer": "no"},
        {"id": "5", "image": "a.png", "question": "Is it red?", "answer": "yes"},
        {"id": "6", "image": "a.png", "question": "Colour?", "options": ["red", "blue"],
         "answer": "A"},
        {"id": "7", "image": "a.png", "question": "Colour?", "options": ["blue", "red"],
         "answer": "B"},
        {"id": "8", "image": "b.png", "question": "Name the animal", "answer": "cow"},
        {"id": "9", "image": "b.png", "question": "Name the animal.", "answer": "horse"},
    ]  # fmt: skip
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    scores, _ = _oracle(tmp_path, path)
    assert scores == dict.fromkeys(scores, 1.0)


def test_pope_and_chartqa_layouts(tmp_path):
    (tmp_path / "png").mkdir()
    for name, colour in (("c1.png", "red"), ("c2.png", "blue")):
        (tmp_path / "png" / name).write_bytes(_png(colour))
    chart = tmp_path / "test_human.json"
    chart.write_text(json.dumps([
        {"imgname": "c1.png", "query": "What is the peak value?", "label": "43.5"},
        {"imgname": "c2.png", "query": "What is the peak value?", "label": "12"},
        {"imgname": "c1.png", "query": "Which year is highest?", "label": "2019"},
    ]))  # fmt: skip
    scores, _ = _oracle(tmp_path / "chart", chart)
    assert scores == dict.fromkeys(scores, 1.0)

    images = tmp_path / "coco"
    images.mkdir()
    (images / "x.jpg").write_bytes(_png("white"))
    (images / "y.jpg").write_bytes(_png("black"))
    pope = tmp_path / "pope" / "coco_pope_random.json"
    pope.parent.mkdir()
    pope.write_text("".join(json.dumps(r) + "\n" for r in [
        {"question_id": 1, "image": "x.jpg", "text": "Is there a dog in the image?",
         "label": "yes"},
        {"question_id": 2, "image": "y.jpg", "text": "Is there a dog in the image?",
         "label": "no"},
    ]))  # fmt: skip
    scores, _ = _oracle(tmp_path / "p", pope, "--image-root", str(images))
    assert scores == dict.fromkeys(scores, 1.0)


def test_pope_images_elsewhere_name_image_root(tmp_path, capsys):
    pope = tmp_path / "pope.json"
    pope.write_text(json.dumps({"question_id": 1, "image": "COCO_val2014_1.jpg",
                                "text": "Is there a dog?", "label": "yes"}) + "\n")  # fmt: skip
    with pytest.raises(ConfigError) as info:
        load_dataset(pope)
    assert "--image-root" in str(info.value) and info.value.parameter == "image_root"
    code = main(["eval", "--data", str(pope), "--backend", "oracle", "--out",
                 str(tmp_path / "o"), "--no-progress"])  # fmt: skip
    assert code != 0
    assert "--image-root" in capsys.readouterr().err
