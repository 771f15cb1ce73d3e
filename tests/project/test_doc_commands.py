"""Every command in the README's and the docs' shell blocks runs as written, or says why not.

Each command line of a ```bash block is either run here (in a fresh folder holding the
repository's `examples/`, the block's commands in order, through `mai-graph`'s own `main`) or
matches one of :data:`NOT_HERE`, a class of commands that need what a test machine does not
have (engines, a GPU, a network, an install). A command that is neither fails the test: a new
doc command must run offline here, or be named by a rule with its reason.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mai_graph.cli import EXIT_OK, main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NOT_HERE: list[tuple[str, str]] = [
    (r"--backend (?:vllm|transformers|openai)\b|--(?:small|large)-url|--tiny\b",
     "starts engines or needs model servers"),
    (r"^mai-graph (?:demo|doctor|serve|train-pair)\b", "starts engines (the tests run them)"),
    (r"^(?:CUDA_VISIBLE_DEVICES=\S+ )?vllm(?:-router)? ", "a GPU machine's server"),
    (r"^(?:\S+=\S*\s+)*langgraph dev\b", "a LangGraph server (tests/adapters/test_studio*.py)"),
    (r"^curl |^\"assistant_id\"|^\"context\"", "talks to a running server"),
    (r"^pip install |scripts/install-cpu\.sh", "installs packages"),
    (r"^export |^[A-Z_]+=\S*$", "sets the environment"),
    (r"^mai-graph calibrate --records (?:report|my-eval|eval)\b|^mai-graph profile --from\b",
     "reads the output of an engine run above it"),
    (r"\.\.\.|\bSMALL\b|\bLARGE\b|\bPAIR/|\bS --large L\b",
     "a template with placeholders for the reader's models"),
]  # fmt: skip


def commands() -> list[tuple[str, int, list[str]]]:
    """(file, block number, command lines) of every shell block, continuations joined."""
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for n, m in enumerate(re.finditer(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S)):
            body = re.sub(r"\\\n\s*", " ", m.group(1))
            lines = [ln.split("  #")[0].strip() for ln in body.splitlines()]
            lines = [ln for ln in lines if ln and not ln.startswith("#")]
            out.append((path.name, n, lines))
    return out


def why_not(line: str) -> str | None:
    """The reason a command cannot run here, or None."""
    for pattern, reason in NOT_HERE:
        if re.search(pattern, line):
            return reason
    return None


FILES = sorted({f for f, _, lines in commands() if any(why_not(c) is None for c in lines)})


def test_every_command_is_run_or_named_by_a_rule():
    unknown = [f"{f}: {c}" for f, _, lines in commands() for c in lines
               if why_not(c) is None and not c.startswith("mai-graph ")]  # fmt: skip
    assert not unknown, "commands neither run here nor named by a rule:\n" + "\n".join(unknown)
    assert len(FILES) >= 5, "the docs lost their offline commands"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A Hugging Face cache holding the real Qwen3-VL configs (as tests/cli/test_recipes.py)."""
    from tests.cli.test_recipes import DATA

    rev = "0" * 40
    for size in ("2B", "4B", "8B", "32B"):
        snapshot = tmp_path / "hub" / f"models--Qwen--Qwen3-VL-{size}-Instruct" / "snapshots" / rev
        snapshot.mkdir(parents=True)
        (snapshot.parents[1] / "refs").mkdir()
        (snapshot.parents[1] / "refs" / "main").write_text(rev)
        for file in (DATA / size).glob("*.json"):
            (snapshot / file.name).write_text(file.read_text())
    # huggingface_hub reads its default cache folder when imported: import it before the
    # environment points at this test's folder, or later tests would read this one
    import huggingface_hub.constants  # noqa: F401

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))


@pytest.mark.parametrize("where", FILES)
def test_doc_commands_run_as_written(where, hub, tmp_path, monkeypatch, capsys):
    """The file's offline commands, in order, in one folder (later blocks read what earlier
    ones wrote, as a reader following the page would)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(work)
    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path / "images"))
    ran = 0
    for file, _, lines in commands():
        for line in lines if file == where else ():
            if why_not(line) is not None:
                continue
            argv = shlex.split(line)
            assert argv[0] == "mai-graph", line
            try:
                status = main(argv[1:])
            except SystemExit as exc:  # --help
                status = exc.code
            out = capsys.readouterr()
            assert status == EXIT_OK, f"{where}: `{line}` exited {status}:\n{out.err[-1500:]}"
            assert "Traceback" not in out.err
            ran += 1
    assert ran
