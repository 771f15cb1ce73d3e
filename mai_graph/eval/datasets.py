"""Evaluation datasets from local files, read into one :class:`Sample` type.

Four formats (nothing is downloaded):

- ``jsonl``: mai-graph's own format, one JSON object per line::

      {"id": "q1", "image": "images/q1.png", "question": "Which shape is red?",
       "options": {"A": "circle", "B": "square"}, "answer": "B", "kind": "choice"}

  ``image`` is a path (relative to the file's folder, or ``image_root``) or a
  ``data:image/...;base64,`` URL; ``image_base64`` holds bare base64 instead. ``kind`` is
  ``choice``, ``yes_no``, ``number`` or ``text`` (inferred when absent: options make a choice,
  yes/no answers a yes_no, numbers a number, anything else text). ``options`` is a mapping
  letter → text (a list is lettered A, B, ...). ``answer`` may also be a list of human
  answers (strings, or VQA-style ``{"answer": ...}`` objects) for kind ``text``: such
  questions are scored by the VQA accuracy, and their gold answer is the most given one.
  ``id`` defaults to the line number. Other fields are kept as the sample's ``meta``.
- ``mmbench``: MMBench-style TSV: ``index``, ``question``, optional ``hint``, option columns
  ``A`` .. ``D`` (blank cells dropped), ``answer``, ``image`` (base64, or the ``index`` of the
  row holding the image), optional ``category`` / ``l2-category`` / ``split``.
- ``pope``: POPE-style yes/no questions, JSON lines or a JSON array of
  ``{"question_id", "image", "text", "label"}`` (``question`` / ``answer`` also accepted).
- ``chartqa``: ChartQA-style JSON array of ``{"imgname", "query", "label"}``; images are read
  from ``png/`` next to the file when that folder exists.

Bad rows (missing image, unknown kind, unreadable answer, duplicate id, ...) are reported with
their line (or item) number; ``on_bad_row="skip"`` drops them, ``"fail"`` raises one
:class:`~mai_graph.errors.ConfigError` listing them all.
"""

from __future__ import annotations

import base64
import binascii
import csv
import functools
import hashlib
import io
import json
import logging
import math
import re
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from mai_graph.answers import canonical_gold, normalize_options
from mai_graph.errors import ConfigError, MAIError, check_int
from mai_graph.eval.scorers import Verdict, reference_form, score
from mai_graph.files import open_regular
from mai_graph.jsonin import parse_json

log = logging.getLogger(__name__)

__all__ = [
    "FORMATS",
    "GROUP_KEY",
    "ROTATIONS_KEY",
    "SHIFT_KEY",
    "Dataset",
    "Format",
    "OnBadRow",
    "RowProblem",
    "Sample",
    "SampleKind",
    "load_dataset",
]

SampleKind = Literal["choice", "yes_no", "number", "text"]
"""The kind of a sample's answer; it decides how the answer is read and scored.

- ``choice``: an option letter; accuracy (an unreadable answer is wrong).
- ``yes_no``: yes or no; POPE metrics (accuracy, precision, recall, F1, yes-ratio).
- ``number``: ChartQA relaxed accuracy (within 5%; years exact).
- ``text``: exact match after VQA normalization; the VQA accuracy when the sample has several
  human answers.
"""

Format = Literal["auto", "jsonl", "mmbench", "pope", "chartqa"]
"""A dataset file format; ``auto`` decides by extension and the first record's fields."""

FORMATS: tuple[str, ...] = get_args(Format)

GROUP_KEY = "circular_group"
"""``meta`` key of a rotation of a multiple-choice question: the id of the question."""

SHIFT_KEY = "circular_shift"
"""``meta`` key of a rotation: which rotation it is (0: the options as first given)."""

ROTATIONS_KEY = "circular_rotations"
"""``meta`` key of a rotation: how many rotations its question has."""

_CIRCULAR_KEYS = (GROUP_KEY, SHIFT_KEY, ROTATIONS_KEY)
_MMBENCH_COPY = 1_000_000  # MMBench numbers the k-th rotation of question i as k * 1e6 + i

OnBadRow = Literal["skip", "fail"]
"""What a bad row does: ``skip`` (reported, dropped) or ``fail`` (the load raises)."""

_KINDS = get_args(SampleKind)
_NUMERIC = re.compile(r"^\s*[-+−]?\$?(\d{1,3}(,\d{3})+|\d+)?(\.\d+)?\s*%?\s*$")
_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,", re.IGNORECASE)
_LETTER_COLUMN = re.compile(r"^[A-Z]$")
_MAGIC = (
    (b"\x89PNG", "png"),
    (b"\xff\xd8", "jpeg"),
    (b"GIF8", "gif"),
    (b"BM", "bmp"),
    (b"RIFF", "webp"),
)


class Sample(BaseModel):
    """One evaluation question with its gold answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    """Unique within the dataset; records and reports are keyed by it."""
    question: str
    kind: SampleKind
    answer: str
    """The gold answer as the dataset gives it (an option letter for ``choice``)."""
    references: list[str] | None = None
    """Every human answer, for ``text`` questions that have several (VQA accuracy)."""
    image: str | None = None
    """An image file path or a ``data:image/...;base64,`` URL."""
    options: dict[str, str] | None = None
    """Option letter → text, for ``choice``."""
    meta: dict[str, Any] = {}
    """Other fields of the row (category, split, ...), kept for breakdowns."""

    def verdict(self, answer: str) -> Verdict:
        """``answer`` scored against this sample's gold answer (and human answers)."""
        return score(answer, self.answer, self.kind, self.options, self.references)

    def graph_input(self) -> dict[str, Any]:
        """The MAI graph's input for this sample (every input key written)."""
        return {"question": self.question, "image": self.image, "options": self.options}

    def digest(self) -> str:
        """A short hash of what the sample asks and expects (to tell datasets apart)."""
        fields: list[Any] = [self.question, self.kind, self.answer, self.options, self.image]
        if self.references is not None:  # rows without them keep their digest
            fields.append(self.references)
        rotation = {k: self.meta[k] for k in _CIRCULAR_KEYS if k in self.meta}
        if rotation:  # a rotation never passes for the plain question (records do not mix)
            fields.append(rotation)
        payload = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RowProblem:
    """A row that could not be read."""

    source: str
    """The dataset file."""
    location: int
    """1-based line number (``unit="line"``) or position in a JSON array (``unit="item"``)."""
    message: str
    unit: Literal["line", "item"] = "line"

    def __str__(self) -> str:
        return f"{self.source} {self.unit} {self.location}: {self.message}"


@dataclass
class Dataset:
    """What :func:`load_dataset` read: the good samples and the bad rows."""

    path: Path
    format: str
    samples: list[Sample]
    problems: list[RowProblem] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.samples)


class _BadRow(Exception):
    """Internal: one row is unusable (message only; the caller adds the location)."""


def load_dataset(
    path: str | Path,
    *,
    format: Format = "auto",
    image_root: str | Path | None = None,
    on_bad_row: OnBadRow = "skip",
    limit: int | None = None,
) -> Dataset:
    r"""Read a dataset file into samples; bad rows are reported with their location.

    Args:
        path: The dataset file.
        format: One of :data:`Format`.
        image_root: Folder that relative image paths are read from (default: the file's
            folder, or its ``png/`` subfolder for ChartQA).
        on_bad_row: ``skip`` bad rows (listed in ``Dataset.problems``) or ``fail``.
        limit: Keep only the first ``limit`` good samples.

    Returns:
        The :class:`Dataset`.

    Raises:
        ConfigError: Unknown format or flag, a missing file, no usable rows, or any bad row
            with ``on_bad_row="fail"``.

    Example:
        >>> import json, pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> rows = [{"id": "a", "question": "Is it?", "answer": "yes"},
        ...         {"id": "b", "question": "How many?", "answer": "3", "kind": "count"}]
        >>> _ = (folder / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
        >>> data = load_dataset(folder / "d.jsonl")
        >>> [(s.id, s.kind) for s in data.samples], data.problems[0].location
        ([('a', 'yes_no')], 2)
    """
    if format not in FORMATS:
        raise ConfigError(
            f"format must be one of {list(FORMATS)}, got {format!r}",
            parameter="format",
            value=format,
            fix="pick a format, or auto to detect it",
        )
    if on_bad_row not in get_args(OnBadRow):
        raise ConfigError(
            f"on_bad_row must be skip or fail, got {on_bad_row!r}",
            parameter="on_bad_row",
            value=on_bad_row,
        )
    if limit is not None:
        check_int(limit, "limit", minimum=1)
    file = Path(path).expanduser()
    if file.exists() and not file.is_dir():  # a pipe or device is refused unread
        open_regular(file, flag="data", what="dataset file").close()
    if not file.is_file():
        raise ConfigError(
            f"dataset {file} is a folder, not a file"
            if file.is_dir()
            else f"dataset file not found: {file}",
            parameter="data",
            value=str(file),
            fix="give the path of a local JSONL, TSV or JSON file",
        )
    fmt = _detect(file) if format == "auto" else format
    root = Path(image_root).expanduser() if image_root is not None else _default_root(file, fmt)
    reader = {
        "jsonl": _read_jsonl,
        "mmbench": _read_mmbench,
        "pope": _read_pope,
        "chartqa": _read_chartqa,
    }[fmt]
    samples: list[Sample] = []
    problems: list[RowProblem] = []
    seen: set[str] = set()
    unit: Literal["line", "item"] = "item" if _is_json_array(file) else "line"
    for location, row in reader(file, root):
        try:
            if isinstance(row, _BadRow):
                raise row
            if row.id in seen:
                raise _BadRow(f"duplicate id {row.id!r}")
        except _BadRow as exc:
            problems.append(RowProblem(str(file), location, str(exc), unit))
            continue
        seen.add(row.id)
        samples.append(row)
        if limit is not None and len(samples) >= limit and fmt != "mmbench":
            break  # an MMBench file is read whole: its rotations are found over every row
    if fmt == "mmbench":
        samples = _mmbench_rotations(samples)[:limit]
    few = [s.id for s in samples if s.references is not None and len(s.references) < 4]
    if few:
        log.warning(
            "%d question(s) in %s have 2 or 3 human answers (e.g. %r): their VQA accuracy "
            "cannot reach 1; give one answer where a single gold answer is meant",
            len(few), file, few[0],
        )  # fmt: skip
    missing = sum(1 for p in problems if p.message.startswith("missing image"))
    image_fix = ""
    if missing:
        image_fix = (f"; {missing} image(s) were not found under {root}: if the images "
                     "live in another folder, pass --image-root DIR (image_root=)")  # fmt: skip
    if problems and on_bad_row == "fail":
        shown = "\n  ".join(str(p) for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ConfigError(
            f"{len(problems)} bad row(s) in {file}:\n  {shown}{more}\n",
            parameter="image_root" if missing == len(problems) else "data",
            value=str(file),
            fix="fix the rows, or skip them (--on-bad-row skip)" + image_fix,
        )
    if not samples:
        shown = "".join(f"\n  {p}" for p in problems[:5])
        raise ConfigError(
            f"no usable samples in {file} ({len(problems)} bad rows){shown}",
            parameter="image_root" if missing and missing == len(problems) else "data",
            value=str(file),
            fix="check the file's format (--format) and its rows" + image_fix,
        )
    return Dataset(file, fmt, samples, problems)


# --- format detection --------------------------------------------------------------------


def _is_json_array(file: Path) -> bool:
    with file.open("rb") as fh:
        head = fh.read(64).lstrip()
    return head.startswith(b"[")


def _detect(file: Path) -> str:
    if file.suffix.lower() in (".tsv", ".tab"):
        return "mmbench"
    first = _first_record(file)
    if first is None:
        return "jsonl"
    keys = set(first)
    if {"imgname", "query"} <= keys:
        return "chartqa"
    if {"text", "label"} <= keys or ("question_id" in keys and "label" in keys):
        return "pope"
    return "jsonl"


def _first_record(file: Path) -> dict[str, Any] | None:
    if _is_json_array(file):
        try:
            data = parse_json(file.read_bytes(), parameter="data", what=str(file))
        except ConfigError:
            return None
        return data[0] if data and isinstance(data[0], dict) else None
    with file.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = parse_json(line, parameter="data", what="line", constants=True)
                except ConfigError:
                    return None
                return obj if isinstance(obj, dict) else None
    return None


def _default_root(file: Path, fmt: str) -> Path:
    if fmt == "chartqa" and (file.parent / "png").is_dir():
        return file.parent / "png"
    return file.parent


# --- shared row checks -------------------------------------------------------------------


def _text(value: Any, name: str) -> str:
    if isinstance(value, bool) or value is None:
        raise _BadRow(f"missing {name}")
    if isinstance(value, int | float):
        value = _number_text(value, name)
    if not isinstance(value, str) or not value.strip():
        raise _BadRow(f"missing {name}")
    return value.strip()


def _number_text(value: float, name: str) -> str:
    """A JSON number as the text a dataset means by it (``3``, ``2.5``, ``1e+300``)."""
    if isinstance(value, int):
        return str(value)  # exact, however large
    if not math.isfinite(value):
        raise _BadRow(f"{name} is {value}, not a value (NaN and Infinity are not allowed)")
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else str(value)


def _infer_kind(answer: str, options: Mapping[str, str] | None) -> str:
    """The kind a row without one most likely has.

    >>> _infer_kind("Yes", None), _infer_kind("1,200", None), _infer_kind("red", None)
    ('yes_no', 'number', 'text')
    """
    if options:
        return "choice"
    if answer.strip().lower() in ("yes", "no"):
        return "yes_no"
    if _NUMERIC.match(answer) and any(c.isdigit() for c in answer):
        return "number"
    return "text"


def _image_from_path(value: str, root: Path) -> str:
    if _DATA_URL.match(value):
        return _checked_data_url(value)
    file = Path(value).expanduser()
    relative = not file.is_absolute()
    if relative:
        file = root / file
    if not file.is_file():
        where = (f" (relative image paths are read under {root}; if the images are in "
                 "another folder, give it with --image-root DIR)") if relative else ""  # fmt: skip
        raise _BadRow(f"missing image: {file} not found{where}")
    _check_header(file, str(file))
    return str(file.resolve())


def _checked_data_url(url: str) -> str:
    match = _DATA_URL.match(url)
    assert match is not None
    _check_header(io.BytesIO(_decode(url[match.end() :])), "<data URL>")
    return url


def _check_header(source: Path | io.BytesIO, shown: str) -> None:
    """Refuse an image whose header no decoder reads, or that has no pixels (a bad row).

    Only the header is read, so loading stays fast on large datasets; an image that fails
    later, while its pixels are decoded for a run, is a bad row of the run
    (:func:`~mai_graph.eval.runner.arun_eval` skips or fails it by ``on_bad_row``).
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():  # the pixel limits are the run's to apply
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(source) as img:
                width, height = img.size
    except Image.DecompressionBombError:
        raise _BadRow(f"image {shown} is too large to decode safely") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        reason = "not an image any decoder reads" if isinstance(
            exc, UnidentifiedImageError) else str(exc) or type(exc).__name__  # fmt: skip
        raise _BadRow(f"image {shown} cannot be decoded ({reason})") from None
    if width <= 0 or height <= 0:
        raise _BadRow(f"image {shown} is empty ({width}x{height} pixels)")


def _decode(b64: str) -> bytes:
    try:
        data = base64.b64decode("".join(b64.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _BadRow(f"image is not valid base64 ({exc})") from None
    if not data:
        raise _BadRow("missing image: empty base64")
    return data


def _image_from_base64(b64: str) -> str:
    data = _decode(b64)
    kind = next((name for magic, name in _MAGIC if data.startswith(magic)), None)
    if kind is None:
        raise _BadRow("image base64 does not decode to a PNG, JPEG, GIF, BMP or WebP file")
    _check_header(io.BytesIO(data), f"<base64 {kind}>")
    return f"data:image/{kind};base64,{base64.b64encode(data).decode('ascii')}"


def _sample(
    *,
    id: str,
    question: Any,
    answer: Any,
    kind: Any = None,
    options: Any = None,
    image: str | None = None,
    meta: dict[str, Any] | None = None,
) -> Sample:
    """Validate one row's fields into a :class:`Sample` (raises :class:`_BadRow`)."""
    q = _text(question, "question")
    answers = _answer_list(answer)
    gold = _most_given(answers) if answers else _text(answer, "answer")
    references = answers if answers and len(answers) > 1 else None
    try:
        opts = normalize_options(options)
    except MAIError as exc:
        raise _BadRow(f"bad options: {exc}") from None
    reserved = sorted(set(meta or {}) & set(_CIRCULAR_KEYS))
    if reserved:
        raise _BadRow(f"field {reserved[0]!r} is reserved for CircularEval's rotations; "
                      "rename it")  # fmt: skip
    if references and opts and kind is None:
        raise _BadRow("a list of answers is for text questions (VQA accuracy); a row with "
                      "options is multiple choice and needs one gold letter")  # fmt: skip
    if kind is None:
        kind = "text" if references else _infer_kind(gold, opts)
    if references and kind != "text":
        raise _BadRow(
            f"a list of answers is for kind text (VQA accuracy), not {kind}; give one answer"
        )
    if kind not in _KINDS:
        raise _BadRow(f"unknown kind {kind!r}; kinds are {list(_KINDS)}")
    if kind == "choice" and not opts:
        raise _BadRow("kind choice needs options")
    if kind != "choice" and opts:
        raise _BadRow(f"options given but kind is {kind}")
    try:
        canonical_gold(gold, kind, opts)
    except MAIError as exc:
        raise _BadRow(f"answer {gold!r} cannot be read as {kind}: {exc}") from None
    return Sample(
        id=id,
        question=q,
        kind=kind,
        answer=gold,
        references=references,
        image=image,
        options=opts,
        meta=meta or {},
    )


def _answer_list(answer: Any) -> list[str] | None:
    """The answers of a row whose ``answer`` is a list (None when it is not a list).

    An empty human answer stays in the list (it matches nothing but counts among the
    answers, as in the VQA benchmark's script).
    """
    if not isinstance(answer, list):
        return None
    if not answer:
        raise _BadRow("missing answer: the list of answers is empty")
    refs = []
    for i, item in enumerate(answer, start=1):
        value = item.get("answer") if isinstance(item, dict) else item
        if isinstance(value, str):
            refs.append(value.strip())
        elif isinstance(value, int | float) and not isinstance(value, bool):
            refs.append(_number_text(value, f"answer {i} of the list"))
        else:
            got = type(value).__name__
            if isinstance(item, dict):
                got = "an object without an 'answer' field" if "answer" not in item else (
                    f"an 'answer' of type {got}")  # fmt: skip
            raise _BadRow(f"answer {i} of the list is not text (got {got})")
    return refs


def _most_given(references: list[str]) -> str:
    """The answer most annotators gave (VQA-normalized; the first such as written).

    >>> _most_given(["Two", "3", "2", "three"]), _most_given(["yes"] * 9 + ["no", "No"])
    ('Two', 'yes')
    """
    forms = [reference_form(ref) for ref in references]
    counts = Counter(form for form in forms if form is not None)
    if not counts:
        raise _BadRow("no answer of the list can be read (all empty after VQA normalization)")
    top = max(counts.values())
    return next(ref for ref, form in zip(references, forms, strict=True)
                if form is not None and counts[form] == top)  # fmt: skip


def _mmbench_rotations(samples: list[Sample]) -> list[Sample]:
    """Mark MMBench's own rotations: row ``k * 1e6 + i`` is rotation ``k`` of question ``i``.

    Groups are found over every good row of the file (``limit`` applies after, so a row is a
    rotation or not whatever the limit). A row joins its question's group only when it asks
    the same question over the same option texts as the group's first row; a question expects
    one rotation per option, so one with rows missing (unreadable, or cut by ``limit``) is
    reported incomplete. A question the file has no other readable row of, and a file
    without rotations, stay plain (ask for rotations with ``--circular``).
    """

    def index(sample: Sample) -> int | None:
        return int(sample.id) if sample.id.isascii() and sample.id.isdigit() else None

    if not any((index(s) or 0) >= _MMBENCH_COPY for s in samples):
        return samples
    first: dict[int, Sample] = {}
    for sample in sorted(samples, key=lambda s: index(s) or 0):
        i = index(sample)
        if i is not None:
            first.setdefault(i % _MMBENCH_COPY, sample)

    def same_question(a: Sample, b: Sample) -> bool:
        texts = sorted((a.options or {}).values()), sorted((b.options or {}).values())
        return a.question == b.question and texts[0] == texts[1]

    def member(sample: Sample) -> bool:
        i = index(sample)
        if i is None or sample.kind != "choice" or not sample.options:
            return False
        return same_question(sample, first[i % _MMBENCH_COPY])  # not another question

    members = {s.id: int(s.id) for s in samples if member(s)}
    sizes = Counter(i % _MMBENCH_COPY for i in members.values())
    out = []
    for sample in samples:
        i = members.get(sample.id)
        if i is None or sizes[i % _MMBENCH_COPY] < 2:
            out.append(sample)  # a question the file gives no rotations of stays plain
            continue
        meta = {**sample.meta, GROUP_KEY: str(i % _MMBENCH_COPY), SHIFT_KEY: i // _MMBENCH_COPY,
                ROTATIONS_KEY: len(sample.options or {})}  # fmt: skip
        out.append(sample.model_copy(update={"meta": meta}))
    return out


# --- readers: each yields (location, Sample | _BadRow) ------------------------------------

_Row = tuple[int, "Sample | _BadRow"]
_JSONL_FIELDS = {"id", "question", "answer", "kind", "options", "image", "image_base64", "meta"}


def _json_lines(file: Path) -> Iterator[tuple[int, Any]]:
    with file.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                # NaN / Infinity reach the row's checks, which name the field
                yield number, parse_json(line, parameter="data", what="the row", constants=True)
            except ConfigError as exc:
                yield number, _BadRow(exc.message)


def _json_records(file: Path) -> Iterator[tuple[int, Any]]:
    if not _is_json_array(file):
        yield from _json_lines(file)
        return
    try:
        data = parse_json(file.read_bytes(), parameter="data", what=str(file), constants=True)
    except ConfigError as exc:
        raise ConfigError(exc.message, parameter="data", value=str(file), fix=exc.fix) from None
    yield from enumerate(data, start=1)


def _rows(records: Iterator[tuple[int, Any]], build: Any) -> Iterator[_Row]:
    for location, obj in records:
        if isinstance(obj, _BadRow):
            yield location, obj
            continue
        if not isinstance(obj, dict):
            yield location, _BadRow(f"expected a JSON object, got {type(obj).__name__}")
            continue
        try:
            yield location, build(location, obj)
        except _BadRow as exc:
            yield location, exc


def _read_jsonl(file: Path, root: Path) -> Iterator[_Row]:
    def build(line: int, obj: dict[str, Any]) -> Sample:
        if obj.get("image") is not None and obj.get("image_base64") is not None:
            raise _BadRow("give image or image_base64, not both")
        image = None
        if obj.get("image") is not None:
            image = _image_from_path(_text(obj["image"], "image"), root)
        elif obj.get("image_base64") is not None:
            image = _image_from_base64(_text(obj["image_base64"], "image_base64"))
        meta = dict(obj.get("meta") or {})
        meta.update({k: v for k, v in obj.items() if k not in _JSONL_FIELDS})
        return _sample(
            id=_text(obj.get("id", f"line-{line}"), "id"),
            question=obj.get("question"),
            answer=obj.get("answer"),
            kind=obj.get("kind"),
            options=obj.get("options"),
            image=image,
            meta=meta,
        )

    return _rows(_json_lines(file), build)


def _read_pope(file: Path, root: Path) -> Iterator[_Row]:
    def build(location: int, obj: dict[str, Any]) -> Sample:
        image = obj.get("image") or obj.get("image_path")
        return _sample(
            id=_text(obj.get("question_id", obj.get("id", location)), "question_id"),
            question=obj.get("text", obj.get("question")),
            answer=obj.get("label", obj.get("answer")),
            kind="yes_no",
            image=_image_from_path(_text(image, "image"), root),
            meta={k: obj[k] for k in ("category", "source") if k in obj},
        )

    return _rows(_json_records(file), build)


def _read_chartqa(file: Path, root: Path) -> Iterator[_Row]:
    def build(location: int, obj: dict[str, Any]) -> Sample:
        name = _text(obj.get("imgname"), "imgname")
        return _sample(
            id=_text(obj.get("id", f"{Path(name).stem}-{location}"), "id"),
            question=obj.get("query"),
            answer=obj.get("label"),
            image=_image_from_path(name, root),
        )

    return _rows(_json_records(file), build)


def _read_mmbench(file: Path, root: Path) -> Iterator[_Row]:
    with file.open(encoding="utf-8", errors="replace", newline="") as fh:
        lines = fh.readlines()  # physical lines, line ends kept (as the csv module reads them)
    header = next(csv.reader(lines[:1], delimiter="\t"), [])
    missing = [c for c in ("index", "question", "answer") if c not in header]
    if missing:
        raise ConfigError(
            f"{file} lacks MMBench columns {missing} (has {header})",
            parameter="data",
            value=str(file),
            fix="give a TSV with index, question, A..D, answer and image columns",
        )
    letters = [c for c in header if _LETTER_COLUMN.match(c)]
    rows: list[tuple[int, dict[str, str]]] = []
    bad: list[tuple[int, _BadRow]] = []
    for line, fields in _tsv_records(lines, header):
        if isinstance(fields, _BadRow):
            bad.append((line, fields))
        else:
            rows.append((line, dict(zip(header, fields, strict=True))))
    images = {
        (row.get("index") or "").strip(): (row.get("image") or "").strip()
        for _, row in rows
        if len((row.get("image") or "").strip()) > 64
    }
    # A referenced image (MMBench's rotations name the row holding it) is decoded once.
    shared = functools.cache(_image_from_base64)
    referenced = {index: functools.partial(shared, b64) for index, b64 in images.items()}
    out: list[_Row] = list(bad)
    for line, row in rows:
        try:
            out.append((line, _mmbench_row(row, letters, referenced, root)))
        except _BadRow as exc:
            out.append((line, exc))
    yield from sorted(out, key=lambda item: item[0])


def _tsv_records(lines: list[str], header: list[str]) -> Iterator[tuple[int, list[str] | _BadRow]]:
    r"""The records of a TSV after its header, each with its first line's number.

    Quotes are read as the CSV rules read them, as VLMEvalKit does (``pandas.read_csv(path,
    sep="\t")``): MMBench's files are written by pandas, which quotes a cell holding a tab, a
    line break or a quote (a hint over several lines is one quoted cell). Reading with quoting
    off would cut such a cell into rows of its own. Quoting on, a cell that opens with a quote
    it never closes runs on over the next lines and swallows their rows; so a record must
    have the header's number of fields, parse cleanly (``strict``), and not hold a line that
    is itself a row (as many tabs as the header). A record that fails is a bad row at its
    first line, and reading starts again on the line after it: one stray quote costs one row,
    never the rows after it.
    """
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    width = len(header)
    at = 1  # the next line the reader takes

    def feed() -> Iterator[str]:
        nonlocal at
        while at < len(lines):
            at += 1
            yield lines[at - 1]

    reader = csv.reader(feed(), delimiter="\t", strict=True)
    while at < len(lines):
        first = at
        try:
            fields: list[str] | None = next(reader)
            error = ""
        except StopIteration:
            break
        except csv.Error as exc:
            fields, error = None, str(exc)
        span = at - first
        if span == 1 and not lines[first].strip():
            continue
        joined = any(line.count("\t") >= width - 1 for line in lines[first + 1 : at])
        if fields is not None and len(fields) == width and not joined:
            yield first + 1, fields
            continue
        quote = '"' in lines[first]
        if span > 1 and quote:
            why = (f"a quote (\") opened in this line runs on to line {at} "
                   f"(lines {first + 1}-{at} would read as one row)")  # fmt: skip
        elif fields is None:
            why = f"its quoting is malformed ({error})"
        else:
            why = f"it has {len(fields)} fields, the header has {width}"
        fix = ("; write a quote inside a cell as \"\" and quote the cell" if quote
               else "; separate the cells with one tab each")  # fmt: skip
        yield first + 1, _BadRow(f"not a row of the table: {why}{fix}")
        at = first + 1  # read on from the next line: the rows a stray quote ran over stay
        reader = csv.reader(feed(), delimiter="\t", strict=True)


def _blank(value: str | None) -> bool:
    return value is None or value.strip() == "" or value.strip().lower() == "nan"


def _mmbench_row(
    row: dict[str, str], letters: list[str], images: Mapping[str, Callable[[], str]], root: Path
) -> Sample:
    index = _text(row.get("index"), "index")
    options = {c: row[c].strip() for c in letters if not _blank(row.get(c))}
    question = _text(row.get("question"), "question")
    if not _blank(row.get("hint")):
        question = f"Hint: {row['hint'].strip()}\n{question}"
    raw = (row.get("image") or "").strip()
    image: str
    if not _blank(row.get("image_path")):
        image = _image_from_path(row["image_path"].strip(), root)
    elif len(raw) > 64:
        image = _image_from_base64(raw)
    elif raw and raw in images:  # a reference to the row that holds the image
        image = images[raw]()
    else:
        raise _BadRow("missing image" + (f" (no row with index {raw!r})" if raw else ""))
    meta = {
        k: row[k].strip() for k in ("category", "l2-category", "split") if not _blank(row.get(k))
    }
    return _sample(
        id=index,
        question=question,
        answer=row.get("answer"),
        kind="choice",
        options=options,
        image=image,
        meta=meta,
    )
