import base64
import csv
import io
import json

import pytest
from PIL import Image

from mai_graph.errors import ConfigError
from mai_graph.eval.datasets import load_dataset


def _png_bytes(colour=(200, 20, 20)):
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), colour).save(buf, format="PNG")
    return buf.getvalue()


def _jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_rows_of_every_kind_and_image_form(tmp_path, png):
    b64 = base64.b64encode(_png_bytes()).decode()
    path = _jsonl(
        tmp_path / "data.jsonl",
        [
            {"id": "c", "image": png.name, "question": "Which?", "options": {"A": "x", "B": "y"},
             "answer": "B", "kind": "choice", "category": "colour"},
            {"id": "l", "image": str(png), "question": "Which?", "options": ["x", "y"],
             "answer": "y"},
            {"id": "y", "image_base64": b64, "question": "Is it red?", "answer": "Yes"},
            {"id": "u", "image": f"data:image/png;base64,{b64}", "question": "How many?",
             "answer": "1,200"},
            {"id": "t", "question": "What colour?", "answer": "Red", "kind": "text"},
        ],
    )  # fmt: skip
    data = load_dataset(path)
    assert data.problems == [] and data.format == "jsonl"
    by_id = {s.id: s for s in data.samples}
    assert by_id["c"].options == {"A": "x", "B": "y"} and by_id["c"].meta == {"category": "colour"}
    assert by_id["c"].image == str(png.resolve())
    assert by_id["l"].kind == "choice" and by_id["l"].options == {"A": "x", "B": "y"}
    assert by_id["y"].kind == "yes_no" and by_id["y"].image.startswith("data:image/png;base64,")
    assert by_id["u"].kind == "number" and by_id["t"].image is None
    assert by_id["c"].graph_input() == {
        "question": "Which?", "image": str(png.resolve()), "options": {"A": "x", "B": "y"}
    }  # fmt: skip


def test_bad_rows_are_reported_with_their_line_numbers(tmp_path, png):
    path = _jsonl(
        tmp_path / "data.jsonl",
        [
            {"id": "ok", "image": png.name, "question": "Is it?", "answer": "yes"},
            {"id": "noimg", "image": "missing.png", "question": "Is it?", "answer": "yes"},
            {"id": "kind", "question": "How many?", "answer": "3", "kind": "count"},
            "{not json",
            {"id": "ok", "question": "Again?", "answer": "no"},
            {"id": "letter", "question": "Which?", "options": {"A": "x", "B": "y"},
             "answer": "C"},
            {"id": "noopts", "question": "Which?", "answer": "A", "kind": "choice"},
            {"id": "b64", "image_base64": "!!!", "question": "Is it?", "answer": "yes"},
            {"id": "noq", "answer": "yes"},
        ],
    )  # fmt: skip
    data = load_dataset(path)
    assert [s.id for s in data.samples] == ["ok"]
    found = {p.location: p.message for p in data.problems}
    assert sorted(found) == [2, 3, 4, 5, 6, 7, 8, 9]
    assert "missing image" in found[2] and "missing.png" in found[2]
    assert "unknown kind 'count'" in found[3]
    assert "not valid JSON" in found[4]
    assert "duplicate id 'ok'" in found[5]
    assert "cannot be read as choice" in found[6]
    assert "kind choice needs options" in found[7]
    assert "not valid base64" in found[8]
    assert "missing question" in found[9]
    assert str(data.problems[0]).endswith("line 2: " + found[2])

    with pytest.raises(ConfigError) as err:
        load_dataset(path, on_bad_row="fail")
    message = str(err.value)
    assert "8 bad row(s)" in message and "line 3: unknown kind" in message


def test_limit_and_empty_files(tmp_path):
    path = _jsonl(
        tmp_path / "d.jsonl",
        [{"id": str(i), "question": "Is it?", "answer": "yes"} for i in range(5)],
    )
    assert len(load_dataset(path, limit=2)) == 2
    empty = _jsonl(tmp_path / "e.jsonl", [{"id": "x", "question": "q", "answer": "3", "kind": "?"}])
    with pytest.raises(ConfigError, match="no usable samples"):
        load_dataset(empty)
    with pytest.raises(ConfigError, match="dataset file not found"):
        load_dataset(tmp_path / "none.jsonl")
    with pytest.raises(ConfigError, match="format must be one of"):
        load_dataset(path, format="csv")


def _tsv(path, header, rows):
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_mmbench_tsv(tmp_path):
    b64 = base64.b64encode(_png_bytes()).decode()
    header = ["index", "question", "hint", "A", "B", "C", "D", "answer", "category", "image"]
    path = _tsv(
        tmp_path / "mmbench.tsv",
        header,
        [
            ["10", "What colour?", "nan", "red", "blue", "green", "", "A", "attr", b64],
            ["11", "Which is left?", "A map.", "x", "y", "nan", "nan", "B", "spatial", "10"],
            ["12", "No image?", "", "x", "y", "", "", "A", "attr", ""],
            ["13", "No answer", "", "x", "y", "", "", "", "attr", b64],
        ],
    )
    data = load_dataset(path)
    assert data.format == "mmbench"
    first, second = data.samples
    assert first.options == {"A": "red", "B": "blue", "C": "green"} and first.kind == "choice"
    assert first.image.startswith("data:image/png;base64,") and first.meta == {"category": "attr"}
    assert second.question == "Hint: A map.\nWhich is left?" and second.image == first.image
    assert second.options == {"A": "x", "B": "y"}
    assert {(p.location, p.message) for p in data.problems} == {
        (4, "missing image"), (5, "missing answer")
    }  # fmt: skip


def test_pope_json_lines_and_array(tmp_path, png):
    rows = [
        {"question_id": 1, "image": png.name, "text": "Is there a dog?", "label": "no"},
        {"question_id": 2, "image": png.name, "text": "Is there a car?", "label": "yes"},
        {"question_id": 3, "image": "gone.jpg", "text": "Is there a cat?", "label": "yes"},
    ]
    lines = _jsonl(tmp_path / "pope.jsonl", rows)
    data = load_dataset(lines)
    assert data.format == "pope" and [s.kind for s in data.samples] == ["yes_no", "yes_no"]
    assert [s.id for s in data.samples] == ["1", "2"]
    assert data.problems[0].location == 3 and data.problems[0].unit == "line"
    array = tmp_path / "pope.json"
    array.write_text(json.dumps(rows))
    data = load_dataset(array)
    assert data.problems[0].unit == "item" and "item 3" in str(data.problems[0])


def test_chartqa_reads_images_from_png_folder(tmp_path):
    (tmp_path / "png").mkdir()
    Image.new("RGB", (40, 30), "white").save(tmp_path / "png" / "c1.png")
    path = tmp_path / "test_human.json"
    path.write_text(
        json.dumps(
            [
                {"imgname": "c1.png", "query": "What is the peak value?", "label": "43.5"},
                {"imgname": "c1.png", "query": "Which year is highest?", "label": "2019"},
                {"imgname": "c1.png", "query": "Which country?", "label": "Japan"},
                {"imgname": "c9.png", "query": "Missing?", "label": "1"},
            ]
        )
    )
    data = load_dataset(path)
    assert data.format == "chartqa"
    assert [s.kind for s in data.samples] == ["number", "number", "text"]
    assert data.samples[0].image == str((tmp_path / "png" / "c1.png").resolve())
    assert data.problems[0].location == 4 and "missing image" in data.problems[0].message


def test_explicit_format_and_image_root(tmp_path, png):
    path = _jsonl(
        tmp_path / "rows.txt",
        [{"question_id": "a", "image": png.name, "text": "Is it?", "label": "yes"}],
    )
    other = tmp_path / "elsewhere"
    other.mkdir()
    data = load_dataset(path, format="pope", image_root=png.parent)
    assert data.samples[0].image == str(png.resolve())
    with pytest.raises(ConfigError, match="missing image"):
        load_dataset(path, format="pope", image_root=other, on_bad_row="fail")


def test_jsonl_rows_with_several_human_answers_are_vqa_questions(tmp_path):
    path = _jsonl(
        tmp_path / "vqa.jsonl",
        [
            {"id": "many", "question": "How many cats?",
             "answer": ["2", "two", "2", "3", "2", "2", "two", "1", "2", "3"]},
            {"id": "objs", "question": "What colour?",
             "answer": [{"answer": "Red", "answer_confidence": "yes"}, {"answer": "red"},
                        {"answer": "maroon"}]},
            {"id": "tie", "question": "What is it?", "answer": ["dog", "puppy"]},
            {"id": "one", "question": "Is it red?", "answer": ["yes"]},
            {"id": "kind", "question": "How many?", "answer": ["2", "3"], "kind": "number"},
            {"id": "empty", "question": "How many?", "answer": []},
            {"id": "blank", "question": "How many?", "answer": ["2", " ", "3"]},
            {"id": "bad", "question": "How many?", "answer": ["2", {"label": "3"}]},
        ],
    )  # fmt: skip
    data = load_dataset(path)
    by_id = {s.id: s for s in data.samples}
    assert sorted(by_id) == ["blank", "many", "objs", "one", "tie"]
    assert by_id["blank"].references == ["2", "", "3"]  # counts, matches nothing
    many = by_id["many"]
    assert many.kind == "text" and many.answer == "2" and len(many.references) == 10
    assert by_id["objs"].answer == "Red" and by_id["objs"].references == ["Red", "red", "maroon"]
    assert by_id["tie"].answer == "dog"  # the first of the most given
    assert by_id["one"].kind == "yes_no" and by_id["one"].references is None  # one answer
    assert many.verdict("two").credit == 1.0 and many.verdict("3").credit == pytest.approx(0.6)
    found = {p.location: p.message for p in data.problems}
    assert "a list of answers is for kind text (VQA accuracy), not number" in found[5]
    assert "the list of answers is empty" in found[6]
    assert "answer 2 of the list is not text (got an object without an 'answer' field)" in found[8]
    assert sorted(found) == [5, 6, 8]


def test_human_answers_are_part_of_the_digest(tmp_path):
    rows = [{"id": "q", "question": "What colour?", "answer": ["red", "red", "blue"]}]
    first = load_dataset(_jsonl(tmp_path / "a.jsonl", rows)).samples[0]
    rows[0]["answer"] = ["red", "red", "green"]
    second = load_dataset(_jsonl(tmp_path / "b.jsonl", rows)).samples[0]
    plain = load_dataset(
        _jsonl(tmp_path / "c.jsonl", [{"id": "q", "question": "What colour?", "answer": "red"}])
    ).samples[0]
    assert first.answer == second.answer == plain.answer == "red"
    assert len({first.digest(), second.digest(), plain.digest()}) == 3


def test_human_answers_that_normalize_to_nothing_count_but_never_match(tmp_path, caplog):
    rows = [
        {"id": "q", "question": "What?", "answer": ["the", "?", "cat", "cat", "cat"]},
        {"id": "void", "question": "What?", "answer": ["the", "?", "..."]},
        {"id": "few", "question": "Which?", "answer": ["dog", "dog", "dog"]},
    ]
    data = load_dataset(_jsonl(tmp_path / "d.jsonl", rows))
    q, few = data.samples
    assert q.answer == "cat" and len(q.references) == 5
    # the two unreadable answers count: 3 x (2/3) + 2 x (3/3) over 5 (2/3 if they were dropped)
    assert q.verdict("cat").credit == pytest.approx(0.8)
    assert q.verdict("the").credit == 0.0 and q.verdict("?").credit == 0.0
    assert "no answer of the list can be read" in data.problems[0].message
    assert few.verdict("dog").credit == pytest.approx(2 / 3)  # three answers cap the credit
    assert "1 question(s)" in caplog.text and "cannot reach 1" in caplog.text


def test_answer_lists_and_reserved_fields_that_are_refused(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"id": "nan", "question": "How many?", "answer": NaN}\n'
        '{"id": "inf", "question": "How many?", "answer": ["2", Infinity]}\n'
        '{"id": "bool", "question": "What?", "answer": ["x", true]}\n'
        '{"id": "nested", "question": "What?", "answer": ["x", ["y"]]}\n'
        '{"id": "opts", "question": "Which?", "options": {"A": "x", "B": "y"}, '
        '"answer": ["A", "B"]}\n'
        '{"id": "group", "question": "What?", "answer": "x", "circular_group": "zzz"}\n'
        '{"id": "big", "question": "How many?", "answer": 1e300}\n'
        '{"id": 1000000000000001, "question": "How many?", "answer": 9007199254740993}\n'
        '{"id": 1000000000000002, "question": "How many?", "answer": 1' + "0" * 400 + "}\n"
        '{"id": "null", "question": "What?", "answer": ["x", {"answer": null}]}\n'
    )
    data = load_dataset(path)
    found = {p.location: p.message for p in data.problems}
    assert "answer is nan, not a value (NaN and Infinity are not allowed)" in found[1]
    assert "answer 2 of the list is inf, not a value" in found[2]
    assert "answer 2 of the list is not text (got bool)" in found[3]
    assert "answer 2 of the list is not text (got list)" in found[4]
    assert "a row with options is multiple choice and needs one gold letter" in found[5]
    assert "'circular_group' is reserved for CircularEval's rotations" in found[6]
    big, exact = data.samples
    assert big.answer == "1e+300"
    assert (exact.id, exact.answer, exact.kind) == ("1000000000000001", "9007199254740993",
                                                    "number")  # fmt: skip
    assert "an integer of 401 digits, over the limit of 100" in found[9]  # jsonin's limit
    assert "answer 2 of the list is not text (got an 'answer' of type NoneType)" in found[10]


def test_no_usable_samples_shows_the_reasons(tmp_path):
    path = _jsonl(tmp_path / "d.jsonl", [{"id": "a", "answer": "x"}])
    with pytest.raises(ConfigError, match=r"no usable samples .*\n  .*line 1: missing question"):
        load_dataset(path)
