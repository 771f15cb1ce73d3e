"""MMBench's CircularEval: rotations of multiple-choice questions, and the circular accuracy."""

import json

import pytest

from mai_graph.backends.fake import ScriptedBackend
from mai_graph.errors import ConfigError
from mai_graph.eval import (
    SimConfig,
    build_report,
    circular_variants,
    read_records,
    run_eval,
    simulated_pair,
)
from mai_graph.eval.circular import GROUP_KEY, ROTATIONS_KEY, SHIFT_KEY
from mai_graph.eval.datasets import Sample, load_dataset
from mai_graph.eval.scorers import headline, kind_metrics


def _choice(id, answer, options, **meta):
    return Sample(id=id, question=f"Question {id}?", kind="choice", answer=answer,
                  options=options, meta=meta)  # fmt: skip


def test_every_rotation_keeps_the_right_text_under_a_new_letter():
    s = _choice("q", "c", {"A": "cat", "B": "dog", "C": "fox", "D": "owl"}, category="animals")
    variants = circular_variants([s])
    assert [v.id for v in variants] == ["q", "q@1", "q@2", "q@3"]
    assert [v.answer for v in variants] == ["C", "B", "A", "D"]
    assert all(v.options[v.answer] == "fox" for v in variants)
    assert all(sorted(v.options.values()) == ["cat", "dog", "fox", "owl"] for v in variants)
    assert variants[0].options == s.options  # rotation 0 is the question as given
    assert [v.meta[SHIFT_KEY] for v in variants] == [0, 1, 2, 3]
    assert {v.meta[ROTATIONS_KEY] for v in variants} == {4}
    assert {v.meta[GROUP_KEY] for v in variants} == {"q"}
    assert all(v.meta["category"] == "animals" for v in variants)
    assert len({v.digest() for v in variants}) == 4


def test_letters_that_are_not_a_run_and_samples_that_are_not_rotated():
    gap = _choice("gap", "E", {"A": "one", "C": "two", "E": "three"})
    variants = circular_variants([gap])
    assert [list(v.options) for v in variants] == [["A", "C", "E"]] * 3
    assert [v.options[v.answer] for v in variants] == ["three"] * 3
    yes = Sample(id="y", question="Is it?", kind="yes_no", answer="yes")
    lone = _choice("lone", "A", {"A": "only"})
    assert circular_variants([yes, lone]) == [yes, lone]


def _run(tmp_path, samples, small, large):
    run_eval(samples, small, large, out_dir=tmp_path, policies=["small", "mai"], progress=False)
    return build_report(read_records(tmp_path))


def test_a_model_that_always_says_a_fails_circular_eval(tmp_path):
    questions = [
        _choice(f"q{i}", "ABCD"[i % 4], {"A": "w", "B": "x", "C": "y", "D": "z"}) for i in range(6)
    ]
    report = _run(tmp_path, circular_variants(questions), ScriptedBackend("A"),
                  ScriptedBackend("A"))  # fmt: skip
    for policy in ("small", "mai"):
        choice = report["policies"][policy]["by_kind"]["choice"]
        assert choice["n"] == 24 and choice["circular_questions"] == 6
        assert choice["accuracy"] == pytest.approx(0.25)  # one rotation in four says A
        assert choice["circular_accuracy"] == 0.0
        assert headline("choice", choice) == ("circular_accuracy", 0.0)
    rows = [r for r in report["samples"] if r["policy"] == "mai"]
    assert {r["group"] for r in rows} == {f"q{i}" for i in range(6)}


def test_the_oracle_passes_every_rotation(tmp_path):
    questions = [_choice(f"q{i}", "B", {"A": "w", "B": "x", "C": "y"}) for i in range(4)]
    samples = circular_variants(questions)
    small, large = simulated_pair(samples, SimConfig.oracle())
    choice = _run(tmp_path, samples, small, large)["policies"]["mai"]["by_kind"]["choice"]
    assert (choice["accuracy"], choice["circular_accuracy"]) == (1.0, 1.0)


def test_circular_accuracy_needs_every_rotation_right():
    rows = [
        {"kind": "choice", "credit": c, "prediction": "A", "gold_canonical": "A", "group": g,
         "rotation": k, "rotations": n}
        for g, k, n, c in [("a", 0, 2, 1.0), ("a", 1, 2, 1.0), ("b", 0, 2, 1.0),
                           ("b", 1, 2, 0.0), ("c", 0, 1, 1.0)]
    ]  # fmt: skip
    m = kind_metrics(rows)["choice"]
    assert m["circular_accuracy"] == pytest.approx(2 / 3) and m["circular_questions"] == 3
    assert m["accuracy"] == pytest.approx(0.8)
    plain = kind_metrics([{**r, "group": None} for r in rows])["choice"]
    assert "circular_accuracy" not in plain


def test_cli_circular_flag(tmp_path, capsys):
    from mai_graph.cli import main

    data = tmp_path / "data"
    assert main(["synth-data", str(data), "--n", "6"]) == 0
    rows = [json.loads(line) for line in (data / "data.jsonl").read_text().splitlines()]
    options = sum(len(r["options"]) for r in rows if r.get("kind") == "choice")
    assert options, "the synthetic set has multiple-choice questions"
    out = tmp_path / "out"
    argv = ["eval", "--data", str(data / "data.jsonl"), "--policies", "small", "--backend",
            "oracle", "--circular", "--out", str(out), "--no-progress", "--no-plots"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    choice = report["policies"]["small"]["by_kind"]["choice"]
    assert choice["n"] == options and choice["circular_accuracy"] == 1.0
    assert "circular_accuracy 1.000" in (out / "report.md").read_text()
    capsys.readouterr()


@pytest.mark.parametrize("gold", ["B", "b", "(B)", "B.", "dog", "B. dog"])
def test_gold_answers_in_any_form_the_loader_accepts(gold):
    s = _choice("q", gold, {"A": "cat", "B": "dog", "C": "fox"})
    assert [v.options[v.answer] for v in circular_variants([s])] == ["dog"] * 3


def test_a_plain_run_and_a_circular_run_do_not_share_a_folder(tmp_path):
    questions = [_choice("q", "B", {"A": "w", "B": "x"})]
    small, large = ScriptedBackend("B"), ScriptedBackend("B")
    run_eval(questions, small, large, out_dir=tmp_path, policies=["small"], progress=False)
    with pytest.raises(ConfigError, match="recorded from a different dataset row"):
        run_eval(circular_variants(questions), small, large, out_dir=tmp_path,
                 policies=["small"], progress=False)  # fmt: skip


def test_questions_with_rotations_missing_are_left_out_and_counted(tmp_path):
    questions = [_choice(f"q{i}", "B", {"A": "w", "B": "x", "C": "y"}) for i in range(3)]
    variants = circular_variants(questions)
    partial = [v for v in variants if v.id != "q2@2"]  # an interrupted run
    small, large = simulated_pair(partial, SimConfig.oracle())
    choice = _run(tmp_path, partial, small, large)["policies"]["small"]["by_kind"]["choice"]
    assert (choice["circular_questions"], choice["circular_incomplete"]) == (2, 1)
    assert choice["circular_accuracy"] == 1.0 and choice["n"] == 8


def test_an_mmbench_file_with_its_own_rotations(tmp_path):
    import base64
    import csv

    from PIL import Image

    png = tmp_path / "p.png"
    Image.new("RGB", (30, 20), (200, 20, 20)).save(png)  # scaled up by the graph
    b64 = base64.b64encode(png.read_bytes()).decode()
    header = ["index", "question", "A", "B", "C", "answer", "image"]
    rows = [
        ["7", "Which?", "cat", "dog", "fox", "B", b64],
        ["1000007", "Which?", "dog", "fox", "cat", "A", "7"],
        ["2000007", "Which?", "fox", "cat", "dog", "C", "7"],
        ["8", "Alone?", "yes", "no", "", "A", b64],
    ]
    path = tmp_path / "mmbench.tsv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(header)
        writer.writerows(rows)
    samples = load_dataset(path).samples
    meta = {s.id: (s.meta.get(GROUP_KEY), s.meta.get(SHIFT_KEY), s.meta.get(ROTATIONS_KEY))
            for s in samples}  # fmt: skip
    # question 8 has no rotations in the file: it stays a plain question
    assert meta == {"7": ("7", 0, 3), "1000007": ("7", 1, 3), "2000007": ("7", 2, 3),
                    "8": (None, None, None)}  # fmt: skip
    rotated = circular_variants(samples)  # the file's rotations are left as they are
    assert [s.id for s in rotated] == ["7", "1000007", "2000007", "8", "8@1"]
    small, large = simulated_pair(samples, SimConfig.oracle())
    choice = _run(tmp_path / "out", samples, small, large)["policies"]["mai"]["by_kind"]["choice"]
    assert (choice["circular_accuracy"], choice["circular_questions"]) == (1.0, 1)
    assert choice["circular_incomplete"] == 0

    # rows cut by --limit leave question 7 incomplete, not complete with fewer rotations
    cut = load_dataset(path, limit=2).samples
    assert [s.meta.get(ROTATIONS_KEY) for s in cut] == [3, 3]
    small, large = simulated_pair(cut, SimConfig.oracle())
    choice = _run(tmp_path / "cut", cut, small, large)["policies"]["mai"]["by_kind"]["choice"]
    assert choice["circular_accuracy"] is None and choice["circular_incomplete"] == 1
    assert headline("choice", choice) == ("accuracy", 1.0)


def test_mmbench_rows_that_share_a_number_but_not_the_question_are_not_grouped(tmp_path):
    import csv

    header = ["index", "question", "A", "B", "answer", "image_path"]
    png = tmp_path / "p.png"
    from PIL import Image

    Image.new("RGB", (64, 48), (20, 200, 20)).save(png)
    rows = [
        ["5", "Which?", "cat", "dog", "A", str(png)],
        ["1000005", "Which?", "dog", "cat", "B", str(png)],
        ["2000005", "Another question?", "up", "down", "A", str(png)],
    ]
    path = tmp_path / "mmbench.tsv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(header)
        writer.writerows(rows)
    groups = {s.id: s.meta.get(GROUP_KEY) for s in load_dataset(path).samples}
    assert groups == {"5": "5", "1000005": "5", "2000005": None}


def test_questions_that_cannot_be_rotated_are_refused_with_the_reason():
    twins = _choice("twins", "B", {"A": "cat", "B": "cat", "C": "dog"})
    with pytest.raises(ConfigError, match="repeat an option text") as err:
        circular_variants([twins])
    assert "twins" in str(err.value)
    q = _choice("q", "A", {"A": "x", "B": "y"})
    named_like_a_rotation = _choice("q@1", "A", {"A": "u", "B": "v"})
    with pytest.raises(ConfigError, match=r"rotation ids clash with sample ids: \['q@1'\]"):
        circular_variants([q, named_like_a_rotation])


def test_the_printed_table_shows_the_circular_accuracy(tmp_path):
    from mai_graph.eval import format_table

    questions = [_choice(f"q{i}", "A", {"A": "w", "B": "x"}) for i in range(3)]
    report = _run(tmp_path, circular_variants(questions), ScriptedBackend("A"),
                  ScriptedBackend("A"))  # fmt: skip
    table = format_table(report)
    assert ("circular_accuracy (choice) (questions right in every rotation): small 0.000 of 3 "
            "· mai 0.000 of 3") in table  # fmt: skip


def test_switching_a_folder_to_circular_names_the_reason(tmp_path):
    questions = [_choice("q", "B", {"A": "w", "B": "x"})]
    small, large = ScriptedBackend("B"), ScriptedBackend("B")
    run_eval(questions, small, large, out_dir=tmp_path, policies=["small"], progress=False)
    with pytest.raises(ConfigError, match=r"recorded as a plain question, asked as a rotation"):
        run_eval(circular_variants(questions), small, large, out_dir=tmp_path,
                 policies=["small"], progress=False)  # fmt: skip


def test_the_printed_table_gives_each_policy_its_own_counts(tmp_path):
    from mai_graph.eval import format_table

    questions = [_choice(f"q{i}", "A", {"A": "w", "B": "x"}) for i in range(2)]
    variants = circular_variants(questions)
    small, large = simulated_pair(variants, SimConfig.oracle())
    run_eval(variants, small, large, out_dir=tmp_path, policies=["small"], progress=False)
    run_eval(variants[:1], small, large, out_dir=tmp_path, policies=["mai"], progress=False)
    table = format_table(build_report(read_records(tmp_path)))
    assert "small 1.000 of 2 · mai - of 0 (+1 incomplete)" in table


def test_an_mmbench_file_cut_by_limit_resumes_with_the_whole_file(tmp_path):
    import csv

    from PIL import Image

    png = tmp_path / "p.png"
    Image.new("RGB", (64, 48), (20, 20, 200)).save(png)
    rows = [["1", "Which?", "cat", "dog", "A", str(png)],
            ["2", "Where?", "up", "down", "B", str(png)],
            ["1000001", "Which?", "dog", "cat", "B", str(png)],
            ["1000002", "Where?", "down", "up", "A", str(png)]]  # fmt: skip
    path = tmp_path / "mmbench.tsv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t")
        writer.writerow(["index", "question", "A", "B", "answer", "image_path"])
        writer.writerows(rows)
    first = load_dataset(path, limit=2).samples  # the base rows only: still rotations
    assert [s.meta[ROTATIONS_KEY] for s in first] == [2, 2]
    whole = load_dataset(path).samples
    small, large = simulated_pair(whole, SimConfig.oracle())
    run_eval(first, small, large, out_dir=tmp_path / "out", policies=["small"], progress=False)
    done = run_eval(whole, small, large, out_dir=tmp_path / "out", policies=["small"],
                    progress=False)  # fmt: skip
    assert (done.skipped, done.done) == (2, 2)
