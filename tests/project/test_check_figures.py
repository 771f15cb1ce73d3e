"""scripts/check_figures.py: a figure in the docs passes only with a backing the check verifies.

Each planted claim below once passed the check with a word next to it; now it must fail, and
the problem must say why. The backings that hold pass.
"""

import importlib.util
from pathlib import Path

import pytest

from mai_graph.results import write_results

ROOT = Path(__file__).resolve().parents[2]
CLAIM = "MAI is 8x faster and keeps 99% of its accuracy"


@pytest.fixture
def checker(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "check_figures", ROOT / "scripts" / "check_figures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.RESULTS_DIR = tmp_path / "results"
    return module


def check(checker, tmp_path, body: str) -> str:
    page = tmp_path / "page.md"
    page.write_text(f"# A page\n\n{body}\n", encoding="utf-8")
    return "\n".join(checker.check(page))


def record(tmp_path, name: str, command: list[str], output=(), data=None) -> None:
    write_results(tmp_path / "results" / name, command=command, output=list(output), data=data)


# -- planted claims that must fail ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        ("`mai-graph no-such-command --flag`", "mai-graph has no command 'no-such-command'"),
        ("`mai-graph eval --no-such-flag`", "mai-graph eval has no flag --no-such-flag"),
        ("`python benchmarks/no_such.py`", "benchmarks/no_such.py does not exist"),
        ("`python benchmarks/load.py --no-such-flag`", "has no flag --no-such-flag"),
        ("`mai-graph eval`", "no results file in"),
        ("measured on a good day", "'measured on' is not a label"),
        ("printed by the benchmark", "'printed by' is not a label"),
        ("by default", "'default' backs a figure only with the name that defines it"),
        ("by default (`NO_SUCH_CONSTANT`)", "'default' backs a figure only with the name"),
        ("(`MAX_READ_BYTES` limit)", "the value of `MAX_READ_BYTES` does not hold them"),
        ("(8x → 99%)", "'→' is not a label"),
        ("on MMBench", "'MMBench' is not a label"),
        ("(see the source)", "'source' is not a label"),
        ("as the paper says", "'the paper' needs a link or an arXiv id"),
        ("(modelled)", "'modelled' needs the model's command or code in backticks"),
        ("(`expected(`)", "no label"),
        ("<!-- expected -->", "no label"),
        ("`docs/results/missing.json`", "results file missing.json does not exist"),
    ],
)
def test_a_claim_with_a_word_that_backs_nothing_fails(checker, tmp_path, label, reason):
    problems = check(checker, tmp_path, f"{CLAIM}, {label}.")
    assert "8x, 99%" in problems and reason in problems, problems


def test_a_command_whose_results_file_lacks_the_numbers_fails(checker, tmp_path):
    record(tmp_path, "eval.json", ["mai-graph", "eval", "--data", "d.jsonl"], ["MAI 7.2x 91%"])
    record(tmp_path, "demo.json", ["mai-graph", "demo"], ["MAI 8x 99%"])  # another command's
    problems = check(checker, tmp_path, f"{CLAIM} (`mai-graph eval --data FILE`).")
    assert "results file eval.json (recorded by `mai-graph eval --data FILE`) does not hold them" \
        in problems  # fmt: skip
    assert "8x, 99%" in problems


def test_a_command_that_recorded_several_files_backs_nothing_until_one_is_named(checker, tmp_path):
    """Pooling every run of `eval` would let a figure match another run's number by chance."""
    record(tmp_path, "a.json", ["mai-graph", "eval", "--data", "a.jsonl"], ["MAI 8x 99%"])
    record(tmp_path, "b.json", ["mai-graph", "eval", "--data", "b.jsonl"], ["MAI 2x 50%"])
    problems = check(checker, tmp_path, f"{CLAIM} (`mai-graph eval`).")
    assert "2 results files were recorded by `mai-graph eval`" in problems
    assert not check(checker, tmp_path, f"{CLAIM} (`mai-graph eval --data a.jsonl`).")
    assert "does not hold them" in check(
        checker, tmp_path, f"{CLAIM} (`mai-graph eval --data b.jsonl`)."
    )


def test_a_named_results_file_that_lacks_the_numbers_or_is_none_fails(checker, tmp_path):
    record(tmp_path, "run.json", ["mai-graph", "eval"], ["MAI 8x"], {"accuracy": 0.97})
    problems = check(checker, tmp_path, f"{CLAIM} (`docs/results/run.json`).")
    assert "99%: results file run.json does not hold them" in problems
    (tmp_path / "results" / "bad.json").write_text('{"command": "mai-graph eval"}')
    problems = check(checker, tmp_path, f"{CLAIM} ([results](results/bad.json)).")
    assert "bad.json is not a results file" in problems and "8x, 99%" in problems


def test_an_html_comment_is_not_a_section_marker(checker, tmp_path):
    problems = check(checker, tmp_path, f"## Speed\n\n<!-- figures: expected -->\n\n{CLAIM}.")
    assert "an HTML comment is not a figures marker" in problems
    assert "8x, 99%" in problems


@pytest.mark.parametrize(
    ("marker", "reason"),
    [
        ("printed by `mai-graph eval` on a good day", "no results file in"),
        ("expected", "it names none"),
        ("measured on this machine", "it names none"),
        ("`docs/results/missing.json`", "results file missing.json does not exist"),
        ("the paper's", "'the paper' needs a link or an arXiv id"),
    ],
)
def test_a_marker_must_name_a_results_file_or_a_source(checker, tmp_path, marker, reason):
    problems = check(
        checker, tmp_path, f"## Speed\n\n*Figures in this section: {marker}.*\n\n{CLAIM}."
    )
    assert "a figures marker must name an existing results file or a source" in problems
    assert reason in problems and "8x, 99%" in problems, problems


def test_a_marker_backs_only_the_figures_its_results_file_holds(checker, tmp_path):
    record(tmp_path, "speed.json", ["python", "benchmarks/load.py"], ["MAI 8.02x"])
    problems = check(
        checker,
        tmp_path,
        "## Speed\n\n*Figures in this section: `docs/results/speed.json`.*\n\n"
        f"{CLAIM}.\n\n## Next\n\nIt took 40 ms.",
    )
    assert "99%: results file speed.json does not hold them" in problems
    assert "8x, 99%" not in problems
    assert "40 ms: no label" in problems  # the marker ends with its section


@pytest.mark.parametrize(
    ("sentence", "shown"),
    [
        ("We ran 197 claims on 156 cases.", "197 claims, 156 cases"),
        ("The suite asks ten questions in three runs.", "ten questions, three runs"),
        ("It passed 54 of 56 and 1,024 test rows.", "54 of 56, 1,024 test rows"),
    ],
)
def test_counts_are_figures(checker, tmp_path, sentence, shown):
    problems = check(checker, tmp_path, sentence)
    assert f"{shown}: no label" in problems, problems


def test_numbers_that_are_not_claims_are_not_figures(checker, tmp_path):
    assert figures_of(checker, "Step 3 runs the model; `0.5` and 2026-01-02, vLLM 0.11.2.") == []
    assert figures_of(checker, "See [it](https://x.org/a/3.5x) and arXiv:2604.04929.") == []


def figures_of(checker, text: str) -> list[str]:
    return [f.text for f in checker.figures(text)]


# -- backings that hold pass ----------------------------------------------------------------------


def test_a_figure_in_a_generated_block_passes(checker, tmp_path):
    assert check(checker, tmp_path, f"<!-- begin:speed -->\n{CLAIM}.\n<!-- end:speed -->") == ""


def test_a_results_file_that_holds_the_figures_passes_up_to_display_rounding(checker, tmp_path):
    record(
        tmp_path,
        "run.json",
        ["mai-graph", "--results", "run.json", "eval", "--data", "d.jsonl"],
        ["speed-up 8.03x", "rows 1,024"],
        {"accuracy": 0.9912, "small": 0.947, "ratio": 3.01},
    )
    text = f"{CLAIM}; small 94.7%, 3.0x, 1,024 rows"
    assert check(checker, tmp_path, f"{text} (`docs/results/run.json`).") == ""
    assert check(checker, tmp_path, f"{text} ([run](results/run.json)).") == ""
    assert check(checker, tmp_path, f"{text}: `mai-graph eval --data FILE`.") == ""
    marker = "*Figures in this section: `docs/results/run.json`, this machine.*"
    assert check(checker, tmp_path, f"## Speed\n\n{marker}\n\n{text}.") == ""


def test_someone_elses_figure_with_its_source_passes(checker, tmp_path):
    assert check(checker, tmp_path, "The paper (arXiv 2604.04929) reports 8x.") == ""
    assert check(checker, tmp_path, "It is [reported](https://example.org/mai) as 8x.") == ""
    marker = "*Figures in this section: the paper's, [arXiv:2604.04929](https://arxiv.org/abs/2604.04929).*"
    assert check(checker, tmp_path, f"## Paper\n\n{marker}\n\n{CLAIM}.") == ""


def test_the_codes_own_value_passes_with_the_constant_that_holds_it(checker, tmp_path):
    # mai_graph/files.py: MAX_READ_BYTES = 16 * 1024 * 1024
    assert (
        check(checker, tmp_path, "A read is capped at the `MAX_READ_BYTES` limit of 16 MiB.") == ""
    )
    assert check(checker, tmp_path, "The `keep_ratio` default is 0.2.") == ""


def test_honest_disclaimers_and_models_pass(checker, tmp_path):
    assert check(checker, tmp_path, f"{CLAIM} (expected).") == ""
    assert check(checker, tmp_path, f"{CLAIM}, e.g. on a larger pair.") == ""
    assert (
        check(checker, tmp_path, f"{CLAIM} (modelled by `python benchmarks/latency_model.py`).")
        == ""
    )


def test_a_test_backs_a_number_it_holds(checker, tmp_path):
    here = "tests/project/test_check_figures.py"
    assert check(checker, tmp_path, f"`{here}` plants 197 claims.") == ""
    absent = 4000 + 242  # not written in this file
    problems = check(
        checker, tmp_path, f"`{here}::test_counts_are_figures` plants {absent} claims."
    )
    assert f"{absent} claims: no label" in problems
    problems = check(checker, tmp_path, f"`{here}::test_no_such_test` plants 197 claims.")
    assert "has no test test_no_such_test" in problems
