"""``records.jsonl``: every generation of an evaluation, append-only, one JSON object per line.

Four line types:

- ``session``: written when an evaluation starts or resumes (settings, models, dataset, the
  dataset's rows skipped when it was read).
- ``call``: one model call (sample id, policy, node, role, model, prompt / cached / generated
  tokens, latency, text, canonical answer, answer probability).
- ``sample``: the completion line of one (policy, sample) run: route, final answer, gold
  answer, wall time.
- ``skipped``: a (policy, sample) run skipped as a bad row (its image does not decode): the
  reason, and the row's digest. A resume does not redo it while the row is unchanged.

A finished run's call lines and its completion line go to the file in *one* write, then the
file is flushed and fsynced, so a crash leaves at most one partial line at the end. Readers
skip (and report) such a line and any call lines that lack their completion line; writers
start a fresh line after it, so appending never corrupts a finished run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from mai_graph.errors import ConfigError
from mai_graph.eval.scorers import Verdict, score
from mai_graph.files import open_regular
from mai_graph.jsonin import parse_json

__all__ = [
    "RECORDS_FILE",
    "CallRecord",
    "RecordSet",
    "RecordWriter",
    "SampleRecord",
    "SampleRun",
    "SessionRecord",
    "SkippedRecord",
    "read_records",
]

RECORDS_FILE = "records.jsonl"


class _Line(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class SessionRecord(_Line):
    """An evaluation started or resumed."""

    type: Literal["session"] = "session"
    started: str
    """ISO time."""
    version: str
    """mai-graph version."""
    context: dict[str, Any]
    """The base MAIContext fields (each run sets ``policy`` and ``answer_kind``)."""
    branches: bool
    """``mai`` runs recorded every branch (gate ``never``, no S2 exit) for replay."""
    keep_ratios: list[float]
    """Keep ratios whose transfer answers were recorded (the context's first)."""
    transfer_variants: list[str] = ["full"]
    """Transfer answers recorded at each keep ratio: ``full``, and ``masked`` (the stated
    final answer left out of the reasoning)."""
    models: dict[str, str]
    """``{"small": name, "large": name}``."""
    data: str | None = None
    policies: list[str] = []
    concurrency: int = 1
    bad_rows: list[str] = []
    """Rows of the dataset skipped when it was read (``FILE line N: why``)."""


class CallRecord(_Line):
    """One model call."""

    type: Literal["call"] = "call"
    sample: str
    policy: str
    node: str
    """``verify``, ``reason``, ``extract`` or ``answer``."""
    role: str
    """``small`` or ``large``."""
    model: str
    prompt_tokens: int
    cached_tokens: int | None = None
    generated_tokens: int
    latency_s: float
    ttft_s: float | None = None
    queue_s: float | None = None
    """The engine's own stage timings and image-token count, where the backend gives them."""
    prefill_s: float | None = None
    decode_s: float | None = None
    image_tokens: int | None = None
    finish_reason: str = "stop"
    distribution: dict[str, float] | None = None
    """Short answers to bounded questions: each allowed answer's probability (one step)."""
    distribution_fallback: str | None = None
    """Why such a short answer was generated instead of read off one step."""
    text: str | None = None
    """What the model wrote."""
    canonical: str | None = None
    """The canonical answer read off ``text`` (answer calls)."""
    answer_prob: float | None = None
    """The model's probability for its answer (answer calls, when the backend gives logprobs)."""
    keep_ratio: float | None = None
    """``answer`` calls: the keep ratio of the reasoning the large model read."""
    transfer: str | None = None
    """``answer`` calls: the sparsified reasoning the large model read."""
    sparsify: dict[str, Any] | None = None
    """``answer`` calls: what sparsification kept and how long scoring took."""
    stage: int | None = None
    """Graphs over a chain of models: the stage of the call (1 pairs the two smallest)."""
    drafter: int | None = None
    """Runs with several drafts: which draft made the call."""
    variant: str | None = None
    """``answer`` calls forked to read the reasoning without its stated final answer:
    ``masked`` (None: the reasoning as sparsified)."""


class SampleRecord(_Line):
    """A finished (policy, sample) run."""

    type: Literal["sample"] = "sample"
    sample: str
    policy: str
    branches: bool = False
    """Every branch was recorded (route and answer below are the ``never`` gate's)."""
    route: str
    answer: str
    canonical: str
    wall_s: float
    """Wall time of the graph run (every recorded branch, for ``branches`` runs)."""
    gold: str
    kind: str
    options: dict[str, str] | None = None
    references: list[str] | None = None
    """The human answers, for questions scored by the VQA accuracy."""
    digest: str
    """The dataset row's hash (:meth:`~mai_graph.eval.datasets.Sample.digest`)."""
    meta: dict[str, Any] = {}

    def verdict(self, answer: str) -> Verdict:
        """``answer`` scored against this sample's gold answer."""
        return score(answer, self.gold, self.kind, self.options, self.references)


class SkippedRecord(_Line):
    """A (policy, sample) run skipped as a bad row: the row's input cannot be used."""

    type: Literal["skipped"] = "skipped"
    sample: str
    policy: str
    reason: str
    """Why, e.g. the image does not decode."""
    digest: str
    """The dataset row's hash: a changed row is run again on resume."""


@dataclass
class SampleRun:
    """A finished run and its calls, in call order."""

    record: SampleRecord
    calls: list[CallRecord]


@dataclass
class RecordSet:
    """What :func:`read_records` found."""

    path: Path
    sessions: list[SessionRecord] = field(default_factory=list)
    runs: dict[tuple[str, str], SampleRun] = field(default_factory=dict)
    """Finished runs by ``(policy, sample id)``; a later run of the same key wins."""
    skipped: dict[tuple[str, str], SkippedRecord] = field(default_factory=dict)
    """Runs skipped as bad rows, by ``(policy, sample id)`` (a later finished run wins)."""
    problems: list[str] = field(default_factory=list)
    """Skipped lines: a partial last line, unreadable lines, calls of unfinished runs."""

    def policies(self) -> list[str]:
        """Policies with finished runs, in first-seen order."""
        return list(dict.fromkeys(policy for policy, _ in self.runs))

    def of(self, policy: str) -> list[SampleRun]:
        """Finished runs of one policy, in record order."""
        return [run for (p, _), run in self.runs.items() if p == policy]


_TYPES: dict[str, type[_Line]] = {
    "session": SessionRecord,
    "call": CallRecord,
    "sample": SampleRecord,
    "skipped": SkippedRecord,
}


def read_records(path: str | Path) -> RecordSet:
    """Read a ``records.jsonl`` (or the folder holding it); unreadable lines are reported.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / RECORDS_FILE).write_text('{"type": "call", "sample": "a"')
        >>> read_records(folder).problems
        ['line 1: partial last line (an interrupted write), ignored']
    """
    file = Path(path)
    if file.is_dir():
        file = file / RECORDS_FILE
    out = RecordSet(file)
    if not file.exists():
        return out
    pending: dict[tuple[str, str], list[CallRecord]] = {}
    orphans = unfinished = 0
    with open_regular(file, flag="records", what="records file") as fh:  # no pipe or device
        raw = fh.read()
    lines = raw.split(b"\n")
    complete = raw.endswith(b"\n")
    for number, data in enumerate(lines, start=1):
        if not data.strip():
            continue
        last = number == len(lines) and not complete
        try:
            obj = parse_json(data, parameter="records", what=f"line {number}")
            kind = _TYPES[obj["type"]]
            line = kind.model_validate(obj)
        except (ConfigError, UnicodeDecodeError, KeyError, TypeError, ValidationError):
            reason = "partial last line (an interrupted write)" if last else "unreadable line"
            out.problems.append(f"line {number}: {reason}, ignored")
            continue
        if isinstance(line, SessionRecord):
            # Calls still pending belong to runs an interruption cut short.
            orphans += sum(len(calls) for calls in pending.values())
            unfinished += len(pending)
            pending.clear()
            out.sessions.append(line)
        elif isinstance(line, CallRecord):
            pending.setdefault((line.policy, line.sample), []).append(line)
        elif isinstance(line, SampleRecord):
            key = (line.policy, line.sample)
            out.runs.pop(key, None)  # a redone run moves to the end
            out.runs[key] = SampleRun(line, pending.pop(key, []))
            out.skipped.pop(key, None)
        elif isinstance(line, SkippedRecord):
            key = (line.policy, line.sample)
            out.runs.pop(key, None)
            out.skipped[key] = line
    orphans += sum(len(calls) for calls in pending.values())
    unfinished += len(pending)
    if orphans:
        out.problems.append(f"{orphans} call line(s) of {unfinished} unfinished run(s) ignored")
    return out


class RecordWriter:
    """Appends finished runs to ``records.jsonl``: one write per run, flushed and fsynced."""

    def __init__(self, path: str | Path) -> None:
        file = Path(path)
        if file.is_dir() or not file.suffix:
            file = file / RECORDS_FILE
        file.parent.mkdir(parents=True, exist_ok=True)
        # A partial last line (an interrupted write) stays a line of its own.
        needs_newline = False
        if file.exists() and file.stat().st_size:
            with file.open("rb") as fh:
                fh.seek(-1, os.SEEK_END)
                needs_newline = fh.read(1) != b"\n"
        self.path = file
        self._lock = threading.Lock()  # runs finish on worker threads; one write at a time
        self._fh = file.open("a", encoding="utf-8")
        if needs_newline:
            self._commit("\n")

    def write(self, lines: Sequence[_Line]) -> None:
        """Append ``lines`` (a run's calls then its completion line) in one write."""
        if self._fh.closed:
            raise ConfigError("the record file is closed", parameter="records")
        self._commit("".join(line.model_dump_json() + "\n" for line in lines))

    def _commit(self, text: str) -> None:
        with self._lock:
            self._fh.write(text)
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file."""
        self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
