#!/usr/bin/env python3
"""Every figure in README.md and docs/ says where it comes from.

A *figure* is a quantity a reader could take as a claim: a number with a unit (ms, s, MB, GB,
tok/s, tokens, points, %), a ratio (``3.01x``), or a decimal. A figure passes when the unit it
stands in (its paragraph, list item, or table with the paragraph above it) carries one of the
labels below; numbers inside code (backticks, code blocks) are the code's own and pass.

- measured: a command or test that prints it, in backticks (``mai-graph ...``,
  ``benchmarks/...``, ``tests/...``, ``.ci/run``, ``python ...``, ``pytest ...``);
- modelled: the word *modelled* (with the model's inputs nearby);
- someone else's: *the paper*, *reported*, *source*, *published*, a link to the source;
- not measured: *expected*, *estimate*, *not measured*, *assumed*, *example*, *e.g.*, an
  arrow (``12 cm → 12``: an example of a rule), *hypothetical*;
- a benchmark's own rule (VQA, ChartQA, MMBench, POPE, MME, VLMEvalKit, lmms-eval named);
- the code's own value: *default*, *limit*, *cap*, *bound* with the constant in backticks.

A section may instead open with a paragraph ``*Figures in this section: WHERE*`` (or the
comment ``<!-- figures: WHERE -->``), WHERE naming the command, machine and date its numbers
were measured with (or their source): every unit up to the next heading of the same or a
higher level is then labelled by it.

Units that need none are listed in ``ALLOWED`` with the reason. Exit status 1, with every
unlabelled figure and where it is, when any is found.

    python scripts/check_figures.py [FILE ...]
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_FIGURE = re.compile(
    r"(?<![\w.#/-])(?:~|about |up to |under |over )?"
    r"\d[\d,]*(?:\.\d+)?(?:\s?(?:%|×|x\b|percent\b|ms\b|s\b|µs\b|us\b|min\b|minutes\b|"
    r"hours?\b|seconds?\b|milliseconds?\b|MB\b|GB\b|"
    r"GiB\b|MiB\b|KB\b|tok/s\b|tokens?/s\b|runs/s\b|tokens?\b|points?\b|pts?\b|px\b|pixels\b|"
    r"calls?\b|steps?\b))"
    r"|(?<![\w.#/-])\d+\.\d+(?![\w.])"
)
_LABEL = re.compile(
    r"`(?:mai-graph |benchmarks/|tests/|\.ci/run|python |pytest|scripts/|\.venv/|mai_graph[./])"
    r"[^`]*`"
    r"|\bmodell?ed\b|\bthe paper\b|\breported\b|\bsource\b|\bpublished\b|\barXiv\b"
    r"|\bexpect(?:ed|ation)?\b|\bestimates?d?\b|\bnot measured\b|\bassumed?\b|\bexample\b"
    r"|\bhypothetical\b|\bmeasured by\b|\bprinted by\b|\bmeasured with\b|\bmeasured on\b"
    r"|\bdefaults?\b|\bby default\b|\blimit\b|\bcap\b|\bbound\b|\be\.g\.|→"
    r"|\b(?:VLMEvalKit|lmms-eval|ChartQA|VQA|MMBench|POPE|MME)\b",
    re.IGNORECASE,
)
_STRICT = re.compile(
    r"`(?:mai-graph |benchmarks/|tests/|\.ci/run|python |pytest|scripts/|mai_graph[./])[^`]*`"
    r"|\bmodell?ed\b|\bthe paper\b|\breported\b|\bpublished\b|\barXiv\b|\bnot measured\b"
    r"|\bestimates?d?\b|\bexpect(?:ed|ation)?\b",
    re.IGNORECASE,
)
"""The labels a section marker must carry: a command, or what kind of figure it is."""
_PATH = re.compile(
    r"`(?:python )?((?:benchmarks|tests|scripts)/[\w./-]+?)(?:::[\w:\[\]-]+)?(?: [^`]*)?`"
)
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_VERSION = re.compile(r"\b(?:v|version |vLLM |Python |torch |transformers |LangChain |"
                      r"langgraph |Qwen)\d+(?:\.\d+)*\b", re.IGNORECASE)  # fmt: skip

ALLOWED: dict[str, str] = {
    # "file: a piece of the unit's text" -> why it needs no label
}
"""Units whose figures need no label, by a piece of their text, with the reason."""


def units(text: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each paragraph, list item and table (with its caption) outside
    code blocks and HTML comments."""
    lines = text.splitlines()
    block: list[str] = []
    start = 0
    fence = False
    caption = ""

    def flush() -> Iterator[tuple[int, str]]:
        nonlocal block, caption
        if block:
            body = "\n".join(block)
            if block[0].lstrip().startswith("|"):
                yield start, caption + "\n" + body
                caption = ""
            else:
                yield start, body
                caption = body
        block = []

    for i, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            yield from flush()
            fence = not fence
            continue
        if fence:
            continue
        stripped = line.strip()
        is_table = stripped.startswith("|")
        new_item = bool(re.match(r"^\s*(?:[-*] |\d+\. )", line)) or stripped.startswith("#")
        if not stripped or (block and (new_item or is_table != block[0].lstrip().startswith("|"))):
            yield from flush()
            if not stripped:
                continue
        if not block:
            start = i
        block.append(line)
    yield from flush()


def figures(unit: str) -> list[str]:
    """The figures of a unit (outside code spans, link targets, dates and version numbers)."""
    text = _CODE_SPAN.sub(" ", unit)
    text = _LINK_TARGET.sub("]", text)
    text = _DATE.sub(" ", text)
    text = _VERSION.sub(" ", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)
    return [m.group().strip() for m in _FIGURE.finditer(text)]


def check(path: Path) -> list[str]:
    """``file:line: figures`` for each unit of ``path`` whose figures carry no label."""
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    problems = []
    level = 0  # the heading level of the current section
    declared: int | None = None  # the level of the section whose marker labels this unit
    for line, unit in units(path.read_text(encoding="utf-8")):
        head = re.match(r"^(#+) ", unit.lstrip())
        if head:
            level = len(head.group(1))
            if declared is not None and level <= declared:
                declared = None
            continue
        missing = [m.group(1) for m in _PATH.finditer(unit) if not (ROOT / m.group(1)).exists()]
        if missing:
            problems.append(f"{rel}:{line}: names files that do not exist: {missing}")
        marker = re.match(r"^\s*(?:<!-- figures: |\*Figures\b)(.*)", unit, re.DOTALL)
        if marker:
            if _STRICT.search(marker.group(1)):
                declared = level
            else:
                problems.append(
                    f"{rel}:{line}: a figures marker must name a command or say what the "
                    "figures are (modelled, the paper's, expected)"
                )
            continue
        if declared is not None:
            continue
        found = figures(unit)
        if not found or _LABEL.search(unit):
            continue
        if any(rel == key.split(": ", 1)[0] and key.split(": ", 1)[1] in unit for key in ALLOWED):
            continue
        shown = ", ".join(dict.fromkeys(found))
        problems.append(f"{rel}:{line}: {shown[:120]}  <- {unit.strip().splitlines()[0][:90]}")
    return problems


def main(argv: list[str]) -> int:
    default = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    paths = [Path(a).resolve() for a in argv] or default
    problems = [p for path in paths for p in check(path)]
    for problem in problems:
        print(problem)
    if problems:
        print(f"\n{len(problems)} unit(s) state figures without saying where they come from: "
              "name the command that prints them, or label them modelled, someone else's "
              "(with the source) or an expectation; see scripts/check_figures.py")  # fmt: skip
        return 1
    print(f"every figure in {len(paths)} file(s) is labelled")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
