"""`mai-graph synth-data`, `eval` and `calibrate` offline (simulated and fake backends)."""

import json

import pytest

from mai_graph.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from mai_graph.context import MAIContext


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synth")
    assert main(["synth-data", str(folder), "--n", "80", "--seed", "2"]) == EXIT_OK
    return folder / "data.jsonl"


@pytest.fixture(scope="module")
def evaluated(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    code = main(["eval", "--data", str(data), "--backend", "simulated", "--branches",
                 "--out", str(out), "--concurrency", "4", "--no-progress",
                 "--sim", "seed=4"])  # fmt: skip
    assert code == EXIT_OK
    return out


@pytest.mark.slow
def test_eval_prints_the_table_and_writes_the_report(evaluated, capsys):
    assert main(["eval", "--report-only", "--out", str(evaluated)]) == EXIT_OK
    out = capsys.readouterr().out
    for word in ("policy", "accuracy", "mai *", "large_cot", "mai routes:", "gap recovered"):
        assert word in out
    for name in ("records.jsonl", "report.json", "report.md", "accuracy_latency.png",
                 "routes.png", "tokens.png"):  # fmt: skip
        assert (evaluated / name).is_file(), name
    report = json.loads((evaluated / "report.json").read_text())
    assert set(report["policies"]) == {"mai", "small", "large", "small_cot", "large_cot"}


def test_eval_again_resumes_with_nothing_to_do(data, evaluated, capsys):
    code = main(["eval", "--data", str(data), "--backend", "simulated", "--branches",
                 "--out", str(evaluated), "--no-progress", "--no-plots",
                 "--sim", "seed=4"])  # fmt: skip
    assert code == EXIT_OK
    assert "0 runs done, 400 already recorded" in capsys.readouterr().err


def test_calibrate_writes_a_context_file_that_eval_accepts(data, evaluated, tmp_path, capsys):
    out = tmp_path / "cal"
    code = main(["calibrate", "--records", str(evaluated), "--max-transfer-share", "0.6",
                 "--out", str(out)])  # fmt: skip
    assert code == EXIT_OK
    printed = capsys.readouterr().out
    assert "chosen:" in printed and "held out:" in printed
    ctx = json.loads((out / "context.json").read_text())
    MAIContext(**ctx)
    assert (out / "calibration.md").is_file() and (out / "calibration_curve.png").is_file()
    result = json.loads((out / "calibration.json").read_text())
    assert result["met"] and result["chosen"]["setting"]["gate"] == ctx["gate"]

    code = main(["eval", "--data", str(data), "--backend", "simulated", "--policies", "mai",
                 "--context", str(out / "context.json"), "--out", str(tmp_path / "again"),
                 "--no-progress", "--no-plots", "--limit", "10"])  # fmt: skip
    assert code == EXIT_OK
    report = json.loads((tmp_path / "again" / "report.json").read_text())
    assert report["mai_settings"]["gate"] == ctx["gate"]


def test_calibrate_exits_1_when_nothing_meets_the_target(evaluated, tmp_path, capsys):
    code = main(["calibrate", "--records", str(evaluated), "--target-accuracy", "0.999",
                 "--out", str(tmp_path)])  # fmt: skip
    assert code == EXIT_ERROR
    assert "no setting meets the objective" in capsys.readouterr().out
    assert not (tmp_path / "context.json").exists()


def test_eval_on_the_fake_backend(data, tmp_path, capsys):
    code = main(["eval", "--data", str(data), "--policies", "mai,small", "--limit", "6",
                 "--out", str(tmp_path), "--no-progress", "--no-plots"])  # fmt: skip
    assert code == EXIT_OK
    assert "demo-small" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "mai,fastest"], "policies must be among"),
        (["--sim", "small=0.5"], "--sim applies to --backend simulated"),
        (["--set", "gate=sometimes"], "gate"),
        (["--keep-ratios", "0.5"], "keep_ratios need branches"),
        (["--context", "/no/such.json"], "context file not found"),
    ],
)
def test_bad_eval_arguments_exit_2(data, tmp_path, capsys, argv, message):
    code = main(["eval", "--data", str(data), "--out", str(tmp_path), "--no-progress", *argv])
    assert code == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_bad_rows_fail_the_run_by_flag(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "a", "question": "Is it?", "answer": "yes"}\n'
        '{"id": "b", "question": "Is it?", "answer": "yes", "kind": "maybe"}\n'
    )
    code = main(["eval", "--data", str(path), "--on-bad-row", "fail", "--out", str(tmp_path)])
    assert code == EXIT_USAGE
    assert "line 2: unknown kind 'maybe'" in capsys.readouterr().err
    code = main(["eval", "--data", str(path), "--out", str(tmp_path / "o"), "--no-progress",
                 "--no-plots", "--policies", "small"])  # fmt: skip
    assert code == EXIT_OK
    assert "skipped:" in capsys.readouterr().err


def test_calibrate_needs_branches(data, tmp_path, capsys):
    main(["eval", "--data", str(data), "--backend", "simulated", "--policies", "mai",
          "--out", str(tmp_path), "--no-progress", "--no-plots", "--limit", "5"])  # fmt: skip
    code = main(["calibrate", "--records", str(tmp_path), "--target-accuracy", "0.5"])
    assert code == EXIT_USAGE
    assert "--branches" in capsys.readouterr().err


def test_docs_mention_every_eval_and_calibrate_flag():
    from pathlib import Path

    from mai_graph.cli import build_parser

    docs = (Path(__file__).resolve().parents[2] / "docs" / "evaluation.md").read_text()
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for command in ("eval", "calibrate", "synth-data"):
        assert f"mai-graph {command}" in docs
        for action in sub.choices[command]._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag not in ("--help", "--verbose"):
                    assert flag in docs, f"docs/evaluation.md does not mention {command} {flag}"


def test_branches_refuse_drafter_runs_they_cannot_replay(tmp_path, capsys):
    from mai_graph.cli import main

    data = tmp_path / "data"
    assert main(["synth-data", str(data), "--n", "5"]) == 0
    argv = ["eval", "--data", str(data / "data.jsonl"), "--policies", "mai", "--backend", "fake",
            "--set", "drafts=3", "--set", "draft_temperature=0.7", "--branches",
            "--out", str(tmp_path / "out"), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    assert "drafts" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--size", "100000"], "size must be an integer from 64 to 4096"),
        (["--size", "8"], "size must be an integer from 64 to 4096"),
        (["--n", "0"], "n must be an integer from 1 to 1,000,000"),
        (["--n", "10000000000"], "n must be an integer from 1 to 1,000,000"),
    ],
)
def test_synth_data_refuses_sizes_it_could_not_draw_before_writing(tmp_path, capsys, flags,
                                                                   needle):  # fmt: skip
    folder = tmp_path / "data"
    assert main(["synth-data", str(folder), *flags]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (folder / "data.jsonl").exists()
