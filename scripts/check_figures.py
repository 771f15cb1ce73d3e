#!/usr/bin/env python3
"""Every figure in README.md and docs/ is backed by something the check can verify.

A *figure* is a quantity a reader could take as a claim, outside code spans, code blocks, HTML
comments, link targets, URLs, arXiv ids, dates and version numbers:

- a number with a unit (ms, s, MB, GiB, tok/s, %, points, ...), a ratio (``3.01x``), a decimal;
- a count: an integer before a count noun (``197 claims``, ``156 test cases``, ``3 warm
  runs``: items, questions, cases, tests, settings, rows, samples, runs, pairs, probes, ...),
  ``N of M`` / ``N out of M``, and a number in words before such a noun (``ten questions``).

Figures inside a generated block (``<!-- begin:NAME -->`` ... ``<!-- end:NAME -->``) pass:
``scripts/gen_docs.py --check`` keeps them equal to the code and the results files.

Any other figure must be backed within its unit (paragraph, list item, or table with the
paragraph above it) or by its section's marker. What backs a figure, each checked:

- a results file: ``docs/results/NAME.json`` (or ``results/NAME.json``) in a code span or a
  link target. It must exist, be a results file (:func:`mai_graph.results.read_results`) and
  hold the figure's number (:func:`~mai_graph.results.numbers_in`), up to display rounding:
  ``94.7%`` matches 94.7, 94.71 or 0.947, ``3.0x`` matches 3.01, ``1,024`` matches 1024;
- a command: ``mai-graph SUB ...``, ``python benchmarks/X.py ...`` or ``benchmarks/X.py`` in
  backticks. It must exist (``mai-graph``: the subcommand and every flag are looked up in
  :func:`mai_graph.cli.build_parser`, placeholders pass; a script: the file exists and holds
  every ``--flag`` named), and a results file in docs/results/ recorded by it (its
  ``command`` starts with the same program and subcommand or script) must hold the number;
- a test: ``tests/PATH.py`` or ``tests/PATH.py::name`` in backticks (the file exists, and
  ``def name`` in it) backs a number written literally in that test file;
- the code's own value: *default*, *limit*, *cap*, *bound*, *at most*, *maximum* or
  *minimum* with a backticked name defined in mai_graph/ or nodes/ (a module- or class-level
  ``NAME = ...`` / ``NAME: T = ...``, found with :mod:`ast`); the number must be written in
  its value (for ``Field(...)``: its default and bounds) or be the value's arithmetic
  (``16 * 1024 * 1024``);

and, for the whole unit:

- modelled: *modelled* with a valid command or a code reference (a defined name or an
  existing path in backticks) naming the model;
- someone else's figure: *the paper*, *reported* or *published* with a link (``http...``) or an
  arXiv id in the unit or its section marker;
- not measured: *expected*, *estimate(d)*, *assumed*, *hypothetical*, *not measured*, *e.g.*,
  *example* (singular) in the prose (not in code or comments).

Nothing else is a label: not *measured on/by/with*, *printed by*, *source*, an arrow, a
benchmark's name, *default* or *limit* alone, an HTML comment.

A section may open with the visible paragraph ``*Figures in this section: WHERE*``: WHERE must
name an existing results file, a command with a recorded results file, or a source (a link or
an arXiv id, or *modelled* with its command); its backing then covers every unit up to the
next heading of the same or a higher level. ``<!-- figures: ... -->`` is refused as a marker.

Units that need none are listed in ``ALLOWED`` with the reason (keep it empty or tiny). Exit
status 1, listing ``file:line: problem`` for each, when anything is unbacked or a label is
broken.

    python scripts/check_figures.py [FILE ...]
"""

from __future__ import annotations

import ast
import functools
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere: the checkout's mai_graph
    sys.path.insert(0, str(ROOT))

RESULTS_DIR = ROOT / "docs" / "results"
"""Where results files live (tests point it at a temporary folder)."""
SOURCE_DIRS = ("mai_graph", "nodes")
"""Where a backticked name must be defined to back a default or a limit."""

ALLOWED: dict[str, str] = {
    # "file: a piece of the unit's text" -> why it needs no backing
}
"""Units whose figures need no backing, by a piece of their text, with the reason."""

# -- what a figure is -----------------------------------------------------------------------------

_UNIT = (
    r"%|×|x\b|percent\b|ms\b|s\b|µs\b|us\b|min\b|minutes?\b|hours?\b|seconds?\b|"
    r"milliseconds?\b|MB\b|GB\b|GiB\b|MiB\b|KB\b|KiB\b|tok/s\b|tokens?/s\b|runs/s\b|"
    r"points?\b|pts?\b|px\b|pixels\b"
)
_NOUN = (
    r"(?:items?|questions?|cases?|tests?|settings?|rows?|samples?|runs?|pairs?|probes?|"
    r"defects?|checkpoints?|claims?|requests?|connections?|tokens?|"
    r"steps?|calls?|seconds?|rounds?|repeats?|epochs?|trials?|failures?|errors?|retries|"
    r"attempts?|examples)\b"
)
"""Nouns whose count is a claim. Not the parts of the design (engines, models, images,
answers, workers): "two models" describes MAI, it measures nothing."""
_WORDS = {
    w: n
    for n, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"thirty": 30, "forty": 40, "fifty": 50, "hundred": 100, "thousand": 1000, "dozen": 12}
_NUM = r"\d[\d,]*(?:\.\d+)?"
_FIGURE = re.compile(
    rf"(?<![\w.#/-])(?P<unit>{_NUM}\s?(?:{_UNIT}))"
    rf"|(?<![\w.#/-])(?P<of>\d[\d,]*\s+(?:out\s+)?of\s+\d[\d,]*)(?![\w.])"
    rf"|(?<![\w.#/-])(?P<count>\d[\d,]*\s+(?:[a-z][\w-]*\s+)?{_NOUN})"
    rf"|\b(?P<word>(?:{'|'.join(w for w in _WORDS if w not in ('zero', 'one'))})"
    rf"\s+(?:[a-z][\w-]*\s+)?{_NOUN})"
    rf"|(?<![\w.#/-])(?P<decimal>\d+\.\d+)(?![\w.])",
    re.IGNORECASE,
)
_NOT_A_COUNT = re.compile(  # "step 2 runs ...", "line 3 calls ...": a place, not a count
    r"\b(?:step|stage|phase|line|section|rule|item|round|part|table|figure|level|issue|"
    r"pass|node|row|column|page|chapter)\s*$",
    re.IGNORECASE,
)
_STRIP = [
    re.compile(r"<!--.*?-->", re.DOTALL),  # comments
    re.compile(r"`[^`]*`"),  # code spans
    re.compile(r"(?<=\])\([^)]*\)"),  # link targets
    re.compile(r"https?://\S+"),  # bare URLs
    re.compile(r"\barXiv:?\s*\d{4}\.\d{4,5}(?:v\d+)?", re.IGNORECASE),
    re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ][\d:.]+Z?)?\b"),  # dates
    re.compile(
        r"\b(?:v|version |vLLM |Python |torch |transformers |LangChain |langgraph |Qwen)"
        r"\d+(?:\.\d+)*\b",
        re.IGNORECASE,
    ),
]


class Figure:
    """A figure as shown, its numbers, the decimals shown (display rounding), and whether it is
    a percentage (``94.7%`` also matches a fraction 0.947)."""

    def __init__(self, text: str, numbers: list[float], decimals: int, percent: bool) -> None:
        self.text, self.numbers, self.decimals, self.percent = text, numbers, decimals, percent

    def held_by(self, pool: set[float]) -> bool:
        return all(any(_same(n, x, self) for x in pool) for n in self.numbers)


def _same(shown: float, value: float, fig: Figure) -> bool:
    tolerance = 0.5 * 10**-fig.decimals + 1e-9
    return abs(value - shown) <= tolerance or (
        fig.percent and abs(value * 100 - shown) <= tolerance
    )


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def figures(unit: str) -> list[Figure]:
    """The figures of a unit (outside code, comments, link targets, dates, versions)."""
    text = unit
    for pattern in _STRIP:
        text = pattern.sub(" ", text)
    found = []
    for m in _FIGURE.finditer(text):
        kind, shown = m.lastgroup, " ".join(m.group().split())
        if kind in ("count", "of") and _NOT_A_COUNT.search(text[: m.start()]):
            continue
        if kind == "word":
            found.append(Figure(shown, [float(_WORDS[shown.split()[0].lower()])], 0, False))
            continue
        digits = re.findall(r"\d[\d,]*(?:\.\d+)?", shown)
        decimals = len(digits[0].split(".")[1]) if "." in digits[0] else 0
        percent = bool(re.search(r"%|percent|points?\b|pts?\b", shown))
        found.append(Figure(shown, [_number(d) for d in digits], decimals, percent))
    return found


# -- units of a page ------------------------------------------------------------------------------


def _blank_generated(text: str) -> str:
    """The page with each generated block's body blanked (line numbers kept)."""
    return re.sub(
        r"(<!-- begin:([\w:.-]+) -->)(.*?)(?=<!-- end:\2 -->)",
        lambda m: m.group(1) + re.sub(r"[^\n]", "", m.group(3)),
        text,
        flags=re.DOTALL,
    )


def units(text: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each paragraph, list item and table (with its caption) outside
    code blocks and generated blocks."""
    lines = _blank_generated(text).splitlines()
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


# -- what backs a figure --------------------------------------------------------------------------

_RESULTS_LABEL = re.compile(r"(?:`|\]\()(?:[\w./-]*/)?(?:docs/)?results/([\w.-]+\.json)[`)]")
_COMMAND = re.compile(r"`((?:python3? )?(?:mai-graph |(?:benchmarks|scripts)/[\w./-]+\.py)[^`]*)`")
_TEST = re.compile(r"`[^`]*?\b(tests/[\w/.-]+\.py)(?:::([\w]+)[\w:\[\]-]*)?[^`]*`")
_PATH = re.compile(
    r"`(?:python3? )?((?:benchmarks|tests|scripts)/[\w./-]+?)(?:::[\w:\[\]-]+)?(?: [^`]*)?`"
)
_IDENT = re.compile(r"`([A-Za-z_][\w.]*)`")
_SOURCE = re.compile(r"\]\(https?://|https?://|\barXiv:?\s*\d{4}\.\d{4,5}", re.IGNORECASE)
_THEIRS = re.compile(r"\bthe paper\b|\breported\b|\bpublished\b", re.IGNORECASE)
_MODELLED = re.compile(r"\bmodell?ed\b", re.IGNORECASE)
_NOT_MEASURED = re.compile(
    r"\bexpect(?:ed|ation)\b|\bestimated?\b|\bestimates\b|\bassumed?\b|\bhypothetical\b"
    r"|\bnot measured\b|\be\.g\.|\bexample\b",
    re.IGNORECASE,
)
_OWN_VALUE = re.compile(r"\bdefaults?\b|\blimits?\b|\bcaps?\b|\bbounds?\b|\bat most\b"
                        r"|\bmaximum\b|\bminimum\b", re.IGNORECASE)  # fmt: skip
_DECOY = re.compile(
    r"\bmeasured (?:on|by|with|here)\b|\bprinted by\b|\bsource\b|→|->|\bdefaults?\b|\blimit\b"
    r"|\bcap\b|\bbound\b|\b(?:VLMEvalKit|lmms-eval|ChartQA|VQA|MMBench|POPE|MME)\b",
    re.IGNORECASE,
)
"""Words that once passed as labels and no longer do: named in the problem."""
_THEIRS_WITH_SOURCE = "someone else's, with its source"


class Backing:
    """What a piece of text (a unit or a section marker) verifiably backs."""

    def __init__(self) -> None:
        self.pools: list[tuple[str, set[float]]] = []  # (a results file, its numbers)
        self.tests: list[tuple[str, str]] = []  # (a test file, its text)
        self.constants: list[tuple[str, set[float]]] = []  # (a name, the numbers of its value)
        self.whole = ""  # why every figure of the unit is backed ("" when not)
        self.errors: list[str] = []  # broken labels: reported whatever the figures
        self.notes: list[str] = []  # why a label backs nothing

    def backs(self, fig: Figure) -> bool:
        if self.whole or any(fig.held_by(pool) for _, pool in self.pools):
            return True
        if any(fig.held_by(values) for _, values in self.constants):
            return True
        return any(
            all(re.search(rf"(?<![\w.]){re.escape(_plain(n))}(?![\d])", text) for n in fig.numbers)
            for _, text in self.tests
        )


def _plain(n: float) -> str:
    return str(int(n)) if n == int(n) else repr(n)


def _results(directory: Path) -> dict[str, dict | str]:
    """Every results file in ``directory``: its body, or why it is not one."""
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    return {path.name: _read(path, path.stat().st_mtime_ns) for path in files}


@functools.cache
def _read(path: Path, mtime: int) -> dict | str:
    from mai_graph.results import read_results

    try:
        return read_results(path)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a broken label
        return str(exc).splitlines()[0]


def _numbers(results: dict) -> set[float]:
    from mai_graph.results import numbers_in

    return numbers_in(results)


@functools.cache
def _parser():
    from mai_graph.cli import build_parser

    return build_parser()


def _words(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for i, w in enumerate(words):
        if w in ("|", "||", "&&", ";", ">", ">>", "2>&1", "<"):
            return words[:i]
    return words


def _placeholder(word: str) -> bool:
    return bool(re.fullmatch(r"[A-Z][A-Z0-9_]*|\.\.\.|<[^>]*>|\[.*\]|\{.*\}", word))


def command_key(command: str) -> tuple[tuple[str, ...] | None, str]:
    """(the program and subcommand or script of ``command``, why it does not exist or "")."""
    import argparse

    words = _words(command)
    while words and (re.fullmatch(r"\w+=\S*", words[0]) or re.search(r"python3?$", words[0])):
        words = words[1:]
    if not words:
        return None, f"`{command}` names no command"
    if not words[0].endswith("mai-graph"):
        script = words[0]
        if not (ROOT / script).is_file():
            return None, f"`{command}`: {script} does not exist"
        source = (ROOT / script).read_text(encoding="utf-8")
        flags = [w.split("=")[0] for w in words[1:] if re.match(r"--[a-z]", w)]
        missing = [f for f in flags if f'"{f}"' not in source and f"'{f}'" not in source]
        if missing:
            return None, f"`{command}`: {script} has no flag {', '.join(missing)}"
        return (script,), ""
    parser, key, rest = _parser(), ["mai-graph"], words[1:]
    while rest:
        word = rest.pop(0)
        if word == "--":
            break
        if word.startswith("-") and not re.fullmatch(r"-\d[\d.]*", word):
            action = parser._option_string_actions.get(word.split("=")[0])
            if action is None:
                return None, f"`{command}`: {' '.join(key)} has no flag {word.split('=')[0]}"
            if action.nargs != 0 and "=" not in word and rest and not rest[0].startswith("-"):
                rest.pop(0)
            continue
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if len(key) == 1 and subs and not _placeholder(word):
            if word not in subs[0].choices:
                return None, f"`{command}`: mai-graph has no command {word!r}"
            parser = subs[0].choices[word]
            key.append(word)
    return tuple(key), ""


def _in_order(needle: list[str], hay: list[str]) -> bool:
    it = iter(hay)
    return all(any(w == h for h in it) for w in needle)


def recorded_by(key: tuple[str, ...], command: str = "") -> list[tuple[str, dict]]:
    """The results files in :data:`RESULTS_DIR` whose command is ``key``'s and holds every
    word ``command`` gives (its flags and values, placeholders aside), in order."""
    given = [w for w in _words(command) if not _placeholder(w)]
    given = given[given.index(key[-1]) + 1 :] if key[-1] in given else []
    return [
        (name, body)
        for name, body in _results(RESULTS_DIR).items()
        if isinstance(body, dict)
        and command_key(body["command"])[0] is not None
        and command_key(body["command"])[0][: len(key)] == key
        and _in_order(given, _words(body["command"]))
    ]


def _value_numbers(node: ast.expr) -> set[float]:
    """The numbers written in a value, and the value itself when it is plain arithmetic."""
    numbers = {_number(n) for n in re.findall(r"\d+(?:\.\d+)?", ast.unparse(node))}
    arithmetic = (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)
    if all(
        isinstance(n, arithmetic) or (isinstance(n, ast.Constant) and type(n.value) in (int, float))
        for n in ast.walk(node)
    ):
        try:
            numbers.add(float(eval(compile(ast.Expression(node), "", "eval"), {})))  # noqa: S307
        except ArithmeticError:
            pass
    return numbers


@functools.cache
def definitions() -> dict[str, list[tuple[str, set[float]]]]:
    """Each module- or class-level name in :data:`SOURCE_DIRS`: (where, the numbers of its
    value) for each place it is defined."""
    found: dict[str, list[tuple[str, set[float]]]] = {}
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef))]
            for scope in scopes:
                for node in scope.body:
                    if isinstance(node, ast.Assign):
                        targets, value = node.targets, node.value
                    elif isinstance(node, ast.AnnAssign) and node.value is not None:
                        targets, value = [node.target], node.value
                    else:
                        continue
                    parts = [value]
                    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "Field":
                        bounds = (
                            "default",
                            "gt",
                            "ge",
                            "lt",
                            "le",
                        )  # a pydantic field's own values
                        parts = value.args[:1] + [
                            k.value for k in value.keywords if k.arg in bounds
                        ]
                    numbers = {n for part in parts for n in _value_numbers(part)}
                    where = f"{path.relative_to(ROOT).as_posix()}:{node.lineno}"
                    for target in targets:
                        if isinstance(target, ast.Name):
                            found.setdefault(target.id, []).append((where, numbers))
    return found


def backing(text: str) -> Backing:
    """What ``text`` verifiably backs, and what is wrong with its labels."""
    b = Backing()
    visible = _STRIP[0].sub(" ", text)
    prose = visible
    for pattern in _STRIP[1:3]:
        prose = pattern.sub(" ", prose)
    for name in dict.fromkeys(_RESULTS_LABEL.findall(visible)):
        body = _results(RESULTS_DIR).get(name)
        if body is None:
            b.errors.append(f"results file {name} does not exist in {_rel(RESULTS_DIR)}")
        elif isinstance(body, str):
            b.errors.append(f"{name} is not a results file: {body}")
        else:
            b.pools.append((f"results file {name}", _numbers(body)))
    commands = []
    for command in dict.fromkeys(_COMMAND.findall(visible)):
        key, why = command_key(command)
        if key is None:
            b.errors.append(f"names a command that does not exist: {why}")
            continue
        commands.append(command)
        held = recorded_by(key, command)
        if not held:
            b.notes.append(f"no results file in {_rel(RESULTS_DIR)} was recorded by `{command}`")
        elif len(held) > 1:  # pooled, a number could match another run's by chance
            b.notes.append(f"{len(held)} results files were recorded by `{command}` "
                           f"({', '.join(n for n, _ in held)}): name the one that holds the "
                           "figures")  # fmt: skip
        else:
            name, body = held[0]
            b.pools.append((f"results file {name} (recorded by `{command}`)", _numbers(body)))
    for path, test in dict.fromkeys(_TEST.findall(visible)):
        if not (ROOT / path).is_file():
            continue  # reported as a missing file
        source = (ROOT / path).read_text(encoding="utf-8")
        if test and not re.search(rf"\bdef {re.escape(test)}\b", source):
            b.errors.append(f"{path} has no test {test}")
        else:
            b.tests.append((path, source))
    names = [n for n in dict.fromkeys(_IDENT.findall(visible)) if n.split(".")[-1] in definitions()]
    refs = names + [p for p in _PATH.findall(visible) if (ROOT / p).exists()]
    if _OWN_VALUE.search(prose):
        for name in names:
            for where, values in definitions()[name.split(".")[-1]]:
                b.constants.append((f"`{name}` ({where})", values))
        if not names:
            b.notes.append(f"{_OWN_VALUE.search(prose).group()!r} backs a figure only with the "
                           "name that defines it in backticks (e.g. `MAX_READ_BYTES`)")  # fmt: skip
    if _NOT_MEASURED.search(prose):
        b.whole = f"labelled {_NOT_MEASURED.search(prose).group()!r}"
    elif _MODELLED.search(prose):
        if commands or refs:
            b.whole = "modelled"
        else:
            b.notes.append("'modelled' needs the model's command or code in backticks")
    elif _THEIRS.search(prose):
        if _SOURCE.search(visible):
            b.whole = _THEIRS_WITH_SOURCE
        else:
            b.notes.append(f"{_THEIRS.search(prose).group()!r} needs a link or an arXiv id")
    return b


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


# -- the check ------------------------------------------------------------------------------------


def check(path: Path) -> list[str]:
    """``file:line: problem`` for each unbacked figure and each broken label of ``path``."""
    rel = _rel(path)
    problems = []
    level = 0  # the heading level of the current section
    declared: tuple[int, Backing] | None = None  # the marker backing this section, its level
    for line, unit in units(path.read_text(encoding="utf-8")):
        head = re.match(r"^(#+) ", unit.lstrip())
        if head:
            level = len(head.group(1))
            if declared is not None and level <= declared[0]:
                declared = None
            continue
        missing = [m for m in _PATH.findall(unit) if not (ROOT / m).exists()]
        if missing:
            problems.append(f"{rel}:{line}: names files that do not exist: {missing}")
        if re.match(r"^\s*<!--\s*figures\b", unit, re.IGNORECASE):
            problems.append(f"{rel}:{line}: an HTML comment is not a figures marker: write "
                            "the visible *Figures in this section: ...*")  # fmt: skip
            continue
        b = backing(unit)
        problems += [f"{rel}:{line}: {e}" for e in b.errors]
        if re.match(r"^\s*\*Figures\b", unit):
            if b.pools or b.whole in ("modelled", _THEIRS_WITH_SOURCE):
                declared = (level, b)
            else:
                why = "; ".join(b.notes) or "it names none"
                problems.append(f"{rel}:{line}: a figures marker must name an existing results "
                                f"file or a source (a link, an arXiv id, or modelled with its "
                                f"command): {why}")  # fmt: skip
            continue
        table = [x for x in unit.splitlines() if x.lstrip().startswith("|")]
        found = figures("\n".join(table) if table else unit)  # a caption is checked on its own
        if declared is not None:
            b.pools += declared[1].pools
            b.whole = b.whole or declared[1].whole
        unbacked = [f for f in found if not b.backs(f)]
        if not unbacked:
            continue
        if any(rel == key.split(": ", 1)[0] and key.split(": ", 1)[1] in unit for key in ALLOWED):
            continue
        why = [*b.notes] + [f"{what} does not hold them" for what, _ in b.pools]
        if b.constants:
            named = sorted({what.split(" (")[0] for what, _ in b.constants})
            more = f" (+{len(named) - 3} more)" if len(named) > 3 else ""
            why.append(f"the value of {', '.join(named[:3])}{more} does not hold them")
        if declared is not None and not declared[1].pools:
            why.append("the section marker holds no numbers")
        decoy = _DECOY.search(_STRIP[1].sub(" ", _STRIP[0].sub(" ", unit)))
        if decoy and not (b.pools or b.constants) and f"{decoy.group()!r}" not in " ".join(why):
            why.append(f"{decoy.group()!r} is not a label")
        if not why:
            why.append("no label: name the results file that holds them")
        shown = ", ".join(dict.fromkeys(f.text for f in unbacked))
        problems.append(f"{rel}:{line}: {shown[:120]}: {'; '.join(dict.fromkeys(why))}"
                        f"  <- {unit.strip().splitlines()[0][:80]}")  # fmt: skip
    return problems


def main(argv: list[str]) -> int:
    default = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    paths = [Path(a).resolve() for a in argv] or default
    problems = [p for path in paths for p in check(path)]
    for problem in problems:
        print(problem)
    if problems:
        print(f"\n{len(problems)} problem(s): a figure needs its results file (or the command "
              "that recorded it), the code that defines it, its source, or a label saying it is "
              "modelled or not measured; see scripts/check_figures.py")  # fmt: skip
        return 1
    print(f"every figure in {len(paths)} file(s) is backed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
