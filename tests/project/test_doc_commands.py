"""Every command in the README's and the docs' shell blocks runs as written, or says why not,
and the output pasted under a command is what it prints today.

Each command line of a ```bash block is either run here (in a fresh folder holding the
repository's `examples/`, the block's commands in order, through `mai-graph`'s own `main`) or
matches one of :data:`NOT_HERE`, a class of commands that need what a test machine does not
have (engines, a GPU, a network, an install). A command that is neither fails the test: a new
doc command must run offline here, or be named by a rule with its reason.

Pasted output. A ```text block that directly follows a ```bash block (only blank lines
between) is the output of that block's *last* command. Its command must run here (an output
that cannot be made here is a recorded block instead: ``<!-- begin:recorded:NAME -->``,
rendered by scripts/gen_docs.py from docs/results/NAME.json, which ``mai-graph --results
docs/results/NAME.json COMMAND ...`` writes), and what it prints on stdout today must match
the pasted text line for line, with trailing whitespace and trailing blank lines ignored and
these declared variable fields (:data:`FIELDS`):

- ``{ms}``, ``{s}``: a time (a number: milliseconds, seconds), e.g. one that includes
  measured work (a simulated run's sparsification scoring);
- ``{x}``: a ratio of such times (a number: ``{x}x`` for a speedup);
- ``{date}``: a date, or a date and time (ISO 8601);
- ``{path}``: a path (text without spaces), e.g. a temporary folder;
- ``{any}``: any text, to the end of the field's line or up to what follows it;
- a line holding only ``...``: any number of lines (an elided part; prefer the whole output).

Spaces next to a field match any run of spaces (a table's column padding moves with the
field's width). Any other text, numbers included, is compared as written. A ```text block
after prose (not directly after a shell block) is not compared: keep examples that are not a
command's output there.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
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

FIELDS: dict[str, str] = {
    "{ms}": r"-?\d+(?:\.\d+)?",
    "{s}": r"-?\d+(?:\.\d+)?",
    "{x}": r"\d+(?:\.\d+)?",
    "{date}": r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?",
    "{path}": r"\S+",
    "{any}": r".*?",
}
"""The variable fields a pasted output may declare, and what each matches."""


@dataclass
class Block:
    """A shell block: its page, number, first line, command lines, and pasted output."""

    file: str
    n: int
    line: int
    lines: list[str]
    output: str | None = None


_FENCE = re.compile(r"^( *)(`{3,})(\w*)\s*$")  # indented in a list item too


def blocks(path: Path) -> list[Block]:
    """The shell blocks of a page, continuations joined; each with the ```text block right
    after it (only blank lines between), if any, as its pasted output."""
    text = path.read_text(encoding="utf-8").splitlines()
    fenced: list[tuple[str, int, int, str]] = []  # (language, first, last line index, body)
    i = 0
    while i < len(text):
        m = _FENCE.match(text[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        close = next((j for j in range(i + 1, len(text)) if text[j].strip() == fence), len(text))
        body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in text[i + 1 : close]]
        fenced.append((lang, i, close, "\n".join(body)))
        i = close + 1
    out: list[Block] = []
    for k, (lang, first, last, body) in enumerate(fenced):
        if lang not in ("bash", "sh", "shell"):
            continue
        joined = re.sub(r"\\\n\s*", " ", body + "\n")
        lines = [ln.split("  #")[0].strip() for ln in joined.splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("#")]
        block = Block(path.name, len(out), first + 1, lines)
        if k + 1 < len(fenced):
            nlang, nfirst, _, nbody = fenced[k + 1]
            if nlang == "text" and all(not ln.strip() for ln in text[last + 1 : nfirst]):
                block.output = nbody
        out.append(block)
    return out


def commands() -> list[tuple[str, int, list[str]]]:
    """(file, block number, command lines) of every shell block, continuations joined."""
    return [(b.file, b.n, b.lines) for path in DOCS for b in blocks(path)]


def why_not(line: str) -> str | None:
    """The reason a command cannot run here, or None."""
    for pattern, reason in NOT_HERE:
        if re.search(pattern, line):
            return reason
    return None


def _lines(text: str) -> list[str]:
    lines = [ln.rstrip() for ln in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def pasted_pattern(pasted: str) -> re.Pattern[str]:
    """The pasted output as a pattern over the printed lines (see the module's docstring)."""
    parts = []
    for line in _lines(pasted):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        pieces = re.split("(" + "|".join(re.escape(f) for f in FIELDS) + ")", line)
        out = []
        for k, piece in enumerate(pieces):
            if piece in FIELDS:
                out.append(FIELDS[piece])
                continue
            core = piece.strip(" ")
            lead, trail = piece[: piece.index(core)] if core else piece, ""
            if core:
                trail = piece[piece.index(core) + len(core) :]
            # spaces next to a field are padding: any run of spaces
            lead = " +" if lead and (k > 0 or not core) and len(pieces) > 1 else re.escape(lead)
            trail = " +" if trail and k + 1 < len(pieces) else re.escape(trail)
            out.append(lead + re.escape(core) + trail)
        parts.append("".join(out) + r"\n")
    return re.compile("".join(parts))


def differs(pasted: str, printed: str) -> str | None:
    """None when ``printed`` matches the pasted output; else what was printed, to paste."""
    body = "".join(line + "\n" for line in _lines(printed))
    if pasted_pattern(pasted).fullmatch(body):
        return None
    return body


FILES = sorted({b.file for path in DOCS for b in blocks(path)
                if any(why_not(c) is None for c in b.lines)})  # fmt: skip


def test_every_command_is_run_or_named_by_a_rule():
    unknown = [f"{f}: {c}" for f, _, lines in commands() for c in lines
               if why_not(c) is None and not c.startswith("mai-graph ")]  # fmt: skip
    assert not unknown, "commands neither run here nor named by a rule:\n" + "\n".join(unknown)
    assert len(FILES) >= 5, "the docs lost their offline commands"


def test_pasted_output_is_of_a_command_run_here():
    """A command that cannot run here has no pasted output: its output is a recorded block."""
    pasted = [b for path in DOCS for b in blocks(path) if b.output is not None]
    assert pasted, "no pasted output found: the block parser lost them"
    unrun = [f"{b.file}:{b.line}: `{b.lines[-1] if b.lines else ''}` ({why_not(b.lines[-1])})"
             for b in pasted if not b.lines or why_not(b.lines[-1]) is not None]  # fmt: skip
    assert not unrun, (
        "output pasted under a command not run here; record it (mai-graph --results "
        "docs/results/NAME.json COMMAND ...) and show it as <!-- begin:recorded:NAME --> "
        "<!-- end:recorded:NAME -->:\n" + "\n".join(unrun)
    )


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


def run_page(page: list[Block], tmp_path: Path, monkeypatch, capsys) -> tuple[int, list[str]]:
    """Run a page's offline commands, in order, in one fresh folder (later blocks read what
    earlier ones wrote, as a reader following the page would); each must exit 0. Returns how
    many ran and how each pasted output differs from what its command printed."""
    work = tmp_path / "work"
    work.mkdir(parents=True)
    (work / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(work)
    monkeypatch.setenv("MAI_GRAPH_IMAGE_DIR", str(tmp_path / "images"))
    ran, stale = 0, []
    for block in page:
        for k, line in enumerate(block.lines):
            if why_not(line) is not None:
                continue
            argv = shlex.split(line)
            assert argv[0] == "mai-graph", line
            try:
                status = main(argv[1:])
            except SystemExit as exc:  # --help
                status = exc.code
            out = capsys.readouterr()
            where = f"{block.file}:{block.line}"
            assert status == EXIT_OK, f"{where}: `{line}` exited {status}:\n{out.err[-1500:]}"
            assert "Traceback" not in out.err
            ran += 1
            if block.output is not None and k == len(block.lines) - 1:
                printed = differs(block.output, out.out)
                if printed is not None:
                    fields = ", ".join(FIELDS)
                    stale.append(f"{where}: `{line}` now prints (declare variable fields as "
                                 f"{fields}):\n{printed}")  # fmt: skip
    return ran, stale


@pytest.mark.slow
@pytest.mark.parametrize("where", FILES)
def test_doc_commands_run_as_written(where, hub, tmp_path, monkeypatch, capsys):
    """The file's offline commands run, and the output pasted under them is what they print."""
    page = next(b for path in DOCS if path.name == where for b in [blocks(path)])
    ran, stale = run_page(page, tmp_path, monkeypatch, capsys)
    assert ran
    assert not stale, "pasted output differs from what the command prints:\n" + "\n".join(stale)


def test_the_readme_dry_run_plans_on_a_fresh_machine(tmp_path, monkeypatch, capsys):
    """No checkpoint config in the Hugging Face cache and offline: the README's `mai-graph
    plan` reads the Qwen3-VL configs shipped with mai-graph (deploy/shape.py: bundled_config)."""
    [line] = [c for b in blocks(ROOT / "README.md") for c in b.lines
              if c.startswith("mai-graph plan --lineup examples/lineups/one-gpu.toml")]  # fmt: skip
    import huggingface_hub.constants  # noqa: F401  (as in `hub`: read its default cache first)

    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(ROOT)
    assert main(shlex.split(line)[1:]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-VL-8B-Instruct" in out and "fits: yes" in out
    assert list((tmp_path / "empty").iterdir()) == []  # nothing downloaded


# -- the comparison itself ------------------------------------------------------------------------


def test_a_pasted_output_is_compared_with_declared_fields_only():
    printed = "40 runs done (2.1 s)\nmean 810 ms at 2026-12-02T10:00:00+00:00\nin /tmp/x1/out\n"
    assert differs("40 runs done ({s} s)\nmean {ms} ms at {date}\nin {path}\n", printed) is None
    assert differs("40 runs done ({s} s)\nmean {ms} ms at {any}\nin {path}", printed) is None
    assert differs("40 runs done ({s} s)\n...\nin {path}", printed) is None
    assert differs("40 runs done ({s} s)\n...\n", printed) is None
    # every other number is compared as written: a stale count or table fails
    assert differs("41 runs done ({s} s)\nmean {ms} ms at {date}\nin {path}", printed) == printed
    assert differs("40 runs done (2.1 s)\nmean 811 ms at {date}\nin {path}", printed) == printed
    # a line missing or extra fails; a field is one line's text, never several lines
    assert differs("40 runs done ({s} s)\nin {path}", printed) is not None
    assert differs("40 runs done ({any})", printed) is not None
    assert differs(printed + "more\n", printed) is not None
    # trailing whitespace and blank lines are ignored; braces that are no field are literal
    assert differs("40 runs done (2.1 s)  \nmean 810 ms at {date}\nin {path}\n\n", printed) is None
    assert differs('{"a": 1}', '{"a": 1}\n') is None
    assert differs('{"a": {ms}}', '{"a": 12.5}\n') is None
    # a field's column padding moves with its width; padding elsewhere is compared
    assert differs("mai    {ms}  {x}x\nsmall    14", "mai  1270  9.5x\nsmall    14\n") is None
    assert differs("mai    {ms}  {x}x\nsmall    14", "mai  1270  9.5x\nsmall 14\n") is not None


PLANTED = """\
# A page

```bash
mai-graph synth-data data --n 3 --seed 7
mai-graph diagram
```

```text
{printed}
```

A ```text block after prose is an example, not compared:

```text
anything at all
```
"""


@pytest.mark.parametrize("right", [True, False])
def test_a_planted_page_with_wrong_pasted_output_fails(right, tmp_path, monkeypatch, capsys):
    from mai_graph.graph import mermaid

    printed = mermaid().strip()
    if not right:  # a stale line: a node renamed
        printed = printed.replace("verify", "verification", 1)
    page = tmp_path / "page.md"
    page.write_text(PLANTED.format(printed=printed))
    found = blocks(page)
    assert len(found) == 1 and found[0].output == printed
    ran, stale = run_page(found, tmp_path, monkeypatch, capsys)
    assert ran == 2
    assert bool(stale) is not right
    if not right:
        assert "page.md:3: `mai-graph diagram` now prints" in stale[0]


def test_a_time_field_matches_any_time(tmp_path, monkeypatch, capsys):
    """A `{ms}` field in a planted page matches the time printed; the same time written as
    a wrong number fails."""
    commands = ("mai-graph synth-data data --n 2 --seed 1\n"
                "mai-graph eval --data data/data.jsonl --backend simulated --policies small "
                "--out e --no-progress --no-plots\n")  # fmt: skip
    page = tmp_path / "page.md"
    page.write_text(f"```bash\n{commands}```\n\n```text\nPLACEHOLDER\n```\n")
    [block] = blocks(page)
    ran, stale = run_page([block], tmp_path / "first", monkeypatch, capsys)
    assert ran == 2 and len(stale) == 1
    printed = stale[0].split("\n", 1)[1]
    row = re.search(r"^small +\d+ +\S+ +(\d+) ", printed, re.M)
    assert row, printed
    cases = ((row.group(1), True), ("{ms}", True), (row.group(1) + "1", False))
    for n, (pasted, passes) in enumerate(cases):
        block.output = printed[: row.start(1)] + pasted + printed[row.end(1) :]
        _, stale = run_page([block], tmp_path / str(n), monkeypatch, capsys)
        assert (not stale) is passes, (pasted, stale)
