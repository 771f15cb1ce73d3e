"""Every benchmark can write a results file (``--results FILE``, ``mai_graph.results``).

The flag is checked in each script's source (importing most of them is slow, and their runs start
engines); one benchmark on no engine runs for real and writes its file, and a failing run writes
none.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from mai_graph.results import read_results

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    p for p in (ROOT / "benchmarks").glob("*.py") if '__name__ == "__main__"' in p.read_text()
)


def run(*argv):
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_the_benchmarks_with_an_entry_point_are_found():
    assert {p.stem for p in SCRIPTS} >= {
        "answers", "engines", "latency_model", "load", "one_step", "overhead", "remote",
        "shapes", "sparsify", "stage_stats",
    }  # fmt: skip


def _calls(tree, name):
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name)
    ]


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_benchmark_takes_results(path):
    tree = ast.parse(path.read_text())
    flags = [
        call
        for call in _calls(tree, "add_argument")
        if call.args and getattr(call.args[0], "value", None) == "--results"
    ]
    assert len(flags) == 1, f"{path.name} has no --results flag"
    keywords = {k.arg: getattr(k.value, "id", None) for k in flags[0].keywords}
    assert keywords.get("help") == "RESULTS_HELP"
    # The command it records is the one a reader types, this script's path included.
    programs = [ast.literal_eval(c.args[0]) for c in _calls(tree, "command_line")]
    assert programs == [["python", f"benchmarks/{path.name}"]]
    withs = [i.context_expr for n in ast.walk(tree) if isinstance(n, ast.With) for i in n.items]
    assert any(w in _calls(tree, "recording") for w in withs), "main runs under recording()"


def test_a_benchmark_writes_what_it_printed_and_its_figures(tmp_path):
    helped = run("benchmarks/answers.py", "--help")
    assert helped.returncode == 0 and "--results FILE" in helped.stdout

    out = run(
        "benchmarks/answers.py", "--rounds", "1", "--size", "1000",
        "--results", str(tmp_path / "x.json"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    r = read_results(tmp_path / "x.json")
    assert r["command"] == "python benchmarks/answers.py --rounds 1 --size 1000"
    assert r["output"] == out.stdout.splitlines()
    kinds = {"choice", "yes_no", "number", "text", "auto"}
    data = r["data"]
    assert set(data["typical"]) == kinds and set(data["long"]) == kinds | {"size"}
    assert data["long"]["size"] == 1000
    blank = r["output"].index("")  # two tables: typical outputs, then long inputs
    typical, long = (
        {line.split()[0]: line for line in table[2:]}
        for table in (r["output"][:blank], r["output"][blank + 1 :])
    )
    for kind in kinds:  # the printed figures are the data's, rounded
        row = data["typical"][kind]
        printed = f"{row['outputs']:8d} {row['median_us']:10.1f} {row['max_us']:10.1f}"
        assert typical[kind].endswith(printed)
        row = data["long"][kind]
        assert row["worst_ms"] >= row["median_ms"] > 0
        assert long[kind].endswith(
            f"{row['worst_ms']:9.1f} {row['median_ms']:10.1f}  {row['slowest']}"
        )


def test_a_failed_benchmark_writes_no_results(tmp_path):
    out = run(
        "benchmarks/load.py", "--waves", "2", "--fake", "2", "--no-engine", "--latency", "0",
        "--max-growth-mb", "-1000", "--results", str(tmp_path / "x.json"),
    )  # fmt: skip
    assert out.returncode == 1 and "FAILED" in out.stdout
    assert not (tmp_path / "x.json").exists()
