"""What a command prints goes where asked: a results file (`--results FILE`), a closed pipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mai_graph.cli import EXIT_OK, main
from mai_graph.errors import ConfigError
from mai_graph.results import FIELDS, numbers_in, read_results, write_results


def test_a_recorded_command_keeps_what_it_printed_and_its_figures(tmp_path, capsys):
    path = tmp_path / "results" / "pair-v2.json"
    assert main(["--results", str(path), "pair", "--pair", "v2"]) == EXIT_OK
    printed = capsys.readouterr().out.splitlines()
    r = read_results(path)
    assert set(FIELDS) <= set(r)
    assert r["command"] == "mai-graph pair --pair v2"  # as a reader would type it again
    # the package's folder on this machine is no part of a committed record
    import mai_graph

    here = str(Path(mai_graph.__file__).resolve().parents[1])
    assert here in "\n".join(printed) and here not in json.dumps(r)
    assert r["output"] == [line.replace(here + "/", "") for line in printed]
    assert r["data"]["manifest"]["task"] == "v2"
    assert r["machine"]["cpus"] and r["date"].endswith("+00:00")
    assert 94.7 in numbers_in(r)  # the large model's held-out accuracy, as printed


def test_a_failed_command_records_nothing(tmp_path, capsys):
    path = tmp_path / "r.json"
    assert main(["--results", str(path), "pair", "--dir", str(tmp_path / "none")]) != EXIT_OK
    assert not path.exists()


def test_a_results_file_is_strict_json_and_checked_when_read(tmp_path):
    with pytest.raises(ConfigError, match="finite numbers"):
        write_results(tmp_path / "nan.json", command="x", output=[], data={"v": float("nan")})
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"command": "x", "output": []}))
    with pytest.raises(ConfigError, match="lacks version"):
        read_results(partial)


@pytest.mark.slow
def test_a_reader_that_leaves_early_is_no_error():
    """`mai-graph diagram | head -1`: the pipe closes before the command writes."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "mai_graph.cli", "diagram", "--models", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.close()  # the reader is gone before Python has even started
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert b"internal error" not in err and b"Traceback" not in err


@pytest.mark.parametrize("make", ["fifo", "link", "folder", "other", "empty", "under_a_file"])
def test_a_results_path_that_is_not_a_new_or_earlier_results_file_is_refused_before_the_run(
    tmp_path, capsys, make
):
    """Never a device, pipe, link, folder or someone's file: refused (exit 2) and untouched."""
    import os

    target = tmp_path / "r.json"
    if make == "fifo":
        os.mkfifo(target)
    elif make == "link":
        fifo = tmp_path / "pipe"
        os.mkfifo(fifo)
        target.symlink_to(fifo)
    elif make == "folder":
        target.mkdir()
    elif make == "other":
        target.write_text("my notes")
    elif make == "under_a_file":
        (tmp_path / "f").write_text("x")
        target = tmp_path / "f" / "r.json"
    path = "" if make == "empty" else str(target)
    code = main(["--results", path, "run", "Is it red?", "--backend", "fake"])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert "--results" in out.err and "internal error" not in out.err
    assert out.out == ""  # refused before the run, not after it
    if make == "other":
        assert target.read_text() == "my notes"
    if make in ("fifo", "link"):
        assert target.is_fifo() or target.resolve().is_fifo()


def test_an_earlier_results_file_is_replaced(tmp_path, capsys):
    target = tmp_path / "r.json"
    write_results(target, command="mai-graph demo", output=["old"])
    assert main(["--results", str(target), "pair", "--pair", "v2"]) == EXIT_OK
    assert read_results(target)["command"] == "mai-graph pair --pair v2"


def test_every_command_reads_the_lineup_mai_graph_lineup_names(tmp_path, monkeypatch, capsys):
    """The variable Studio reads reaches the CLI (serve, run, eval) too: a missing file is an
    error naming the variable, never a silent fall-back to the fake pair."""
    monkeypatch.setenv("MAI_GRAPH_LINEUP", str(tmp_path / "missing.toml"))
    assert main(["run", "Is it red?"]) == 2
    assert "MAI_GRAPH_LINEUP" in capsys.readouterr().err
    lineup = tmp_path / "lineup.toml"  # a model that is nowhere: the error names it
    lineup.write_text(f'backend = "transformers"\n[small]\nmodel = "{tmp_path}/s-env"\n'
                      f'[large]\nmodel = "{tmp_path}/l-env"\n')  # fmt: skip
    monkeypatch.setenv("MAI_GRAPH_LINEUP", str(lineup))
    assert main(["run", "Is it red?"]) != EXIT_OK
    assert "s-env" in capsys.readouterr().err
    other = tmp_path / "other.toml"
    other.write_text(lineup.read_text().replace("-env", "-flag"))
    assert main(["run", "Is it red?", "--lineup", str(other)]) != EXIT_OK  # the flag wins
    err = capsys.readouterr().err
    assert "s-flag" in err and "s-env" not in err
    monkeypatch.delenv("MAI_GRAPH_LINEUP")
    assert main(["run", "Is it red?"]) == EXIT_OK  # unset: the fake pair, as before


def test_engine_log_lines_are_no_part_of_a_record(tmp_path, capsys):
    from mai_graph.results import recording

    path = tmp_path / "r.json"
    with recording(path, command="python benchmarks/x.py"):
        print("(EngineCore pid=7) INFO 12-06 06:14:10 [core.py:1] started")
        print("WARNING 12-06 06:14:10 [cpu.py:2] no Triton")
        print("median 151.4 ms")
    assert read_results(path)["output"] == ["median 151.4 ms"]


def test_an_eval_record_keeps_the_reports_figures_not_its_rows(tmp_path, capsys):
    """Per-sample rows and the sweep's curve stay in report.json: in a results file their
    thousands of numbers would let a quoted figure match one by chance."""
    data = tmp_path / "data"
    assert main(["synth-data", str(data), "--n", "8"]) == EXIT_OK
    path = tmp_path / "eval.json"
    argv = ["--results", str(path), "eval", "--data", str(data / "data.jsonl"), "--backend",
            "simulated", "--out", str(tmp_path / "ev"), "--no-plots", "--no-progress"]  # fmt: skip
    assert main(argv) == EXIT_OK
    report = read_results(path)["data"]["report"]
    full = json.loads((tmp_path / "ev" / "report.json").read_text())
    assert full["samples"] and "samples" not in report
    assert "curve" not in report.get("cost_quality", {})
    assert report["policies"] == full["policies"]
