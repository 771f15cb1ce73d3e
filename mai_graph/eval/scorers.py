"""Scoring against gold answers, on the gate's canonicalization (:mod:`mai_graph.answers`).

Per kind, following the benchmarks' usual conventions:

- ``choice`` (MMBench-style): accuracy; an answer no option letter can be read from is wrong.
- ``yes_no`` (POPE): accuracy, precision, recall and F1 of "yes", and the yes-ratio. An answer
  that is neither yes nor no is wrong and counts as not-yes (it lowers recall, never
  precision); its share is reported as ``unknown_ratio``.
- ``number`` (ChartQA): relaxed accuracy, right within 5% of the gold value; years, dates and
  times must match exactly.
- ``text`` (VQA): exact match after VQA normalization (case, punctuation, articles, number
  words). With several human answers per question (VQAv2, TextVQA, VizWiz), the VQA accuracy
  instead: for each answer left out, ``min(1, matches among the others / 3)``, averaged. An
  answer three annotators gave earns full credit, one two gave about 0.6.

Every verdict carries a ``credit`` in [0, 1] (0 or 1 except for the VQA accuracy); accuracies
are mean credits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mai_graph.answers import UNKNOWN, canonical_gold, extract_answer, match_gold
from mai_graph.errors import MAIError

__all__ = [
    "GOLD_REL_TOL",
    "METRIC_NAMES",
    "VQA_FULL_CREDIT",
    "Verdict",
    "headline",
    "kind_metrics",
    "pope_metrics",
    "reference_form",
    "score",
    "vqa_accuracy",
]

GOLD_REL_TOL = 0.05
"""ChartQA's relaxed-accuracy tolerance (independent of the gate's ``rel_tol``)."""

METRIC_NAMES = {
    "choice": "accuracy",
    "yes_no": "accuracy",
    "number": "relaxed_accuracy",
    "text": "exact_match",
}
"""The headline metric of each kind (all are the mean of per-sample credits); a ``text`` group
with several human answers per question reports ``vqa_accuracy`` instead."""

VQA_FULL_CREDIT = 3
"""Matching human answers that earn full credit in the VQA accuracy."""


@dataclass(frozen=True)
class Verdict:
    """Whether one prediction is right, and the canonical forms compared."""

    correct: bool
    """Full credit."""
    prediction: str
    """The canonical prediction (:data:`~mai_graph.answers.UNKNOWN` if unreadable)."""
    credit: float = math.nan
    """1.0 or 0.0 (from ``correct`` when not given); the VQA accuracy in [0, 1] when the
    sample has several human answers."""

    def __post_init__(self) -> None:
        if math.isnan(self.credit):
            object.__setattr__(self, "credit", 1.0 if self.correct else 0.0)


def score(
    prediction: str,
    gold: str,
    kind: str,
    options: Mapping[str, str] | None = None,
    references: Sequence[str] | None = None,
) -> Verdict:
    """Score one model answer against its gold answer (or its human answers, for VQA).

    >>> score("The answer is (B).", "B", "choice", {"A": "cat", "B": "dog"}).correct
    True
    >>> score("About 104", "100", "number").correct, score("2020", "2019", "number").correct
    (True, False)
    >>> humans = ["two", "2", "2", "3", "2", "two", "3", "3", "2", "4"]
    >>> [round(score(a, "2", "text", references=humans).credit, 2) for a in ("2", "3", "4")]
    [1.0, 0.9, 0.3]

    Args:
        prediction: The model's answer.
        gold: The dataset's answer.
        kind: The sample's kind.
        options: Multiple-choice options.
        references: ``text`` samples: every human answer (two or more: VQA accuracy).
    """
    canonical = extract_answer(prediction, kind, options)
    if canonical == UNKNOWN:
        return Verdict(False, canonical, 0.0)
    if references is not None and len(references) > 1:
        credit = vqa_accuracy(prediction, references)
        return Verdict(credit >= 1.0, canonical, credit)
    correct = match_gold(prediction, gold, kind, options=options, rel_tol=GOLD_REL_TOL)
    return Verdict(bool(correct), canonical, 1.0 if correct else 0.0)


def vqa_accuracy(prediction: str, references: Sequence[str]) -> float:
    """The VQA accuracy of one answer against its human answers (VQA-normalized).

    Each human answer is left out in turn; the answer earns ``min(1, matches / 3)`` among the
    others, and the credits are averaged (the VQA benchmark's definition).

    >>> vqa_accuracy("Two", ["2"] * 3 + ["3"] * 7), vqa_accuracy("2", ["2"] * 4 + ["3"] * 6)
    (0.9, 1.0)
    """
    got = extract_answer(prediction, "text")  # read once, compared with every human answer
    if got == UNKNOWN:
        return 0.0
    hits = [reference_form(ref) == got for ref in references]
    total = sum(hits)
    return sum(min(1.0, (total - hit) / VQA_FULL_CREDIT) for hit in hits) / len(hits)


def reference_form(answer: str) -> str | None:
    """The VQA-normalized form of one human answer; None for one that normalizes to nothing.

    Such an answer ("the", "?", "") matches no prediction but still counts among the answers,
    as in the benchmark's script.

    >>> reference_form("Two."), reference_form("the")
    ('2', None)
    """
    try:
        return canonical_gold(answer, "text")
    except MAIError:
        return None


def pope_metrics(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """POPE metrics from ``(canonical prediction, canonical gold)`` pairs; "yes" is positive.

    >>> m = pope_metrics([("yes", "yes")] * 3 + [("yes", "no"), ("no", "yes"), ("no", "no")])
    >>> m["tp"], m["fp"], m["fn"], m["tn"], round(m["f1"], 3), m["yes_ratio"]
    (3, 1, 1, 1, 0.75, 0.6666666666666666)
    """
    tp = fp = tn = fn = unknown = n = 0
    for pred, gold in pairs:
        n += 1
        if pred not in ("yes", "no"):
            unknown += 1
        if gold == "yes":
            if pred == "yes":
                tp += 1
            else:
                fn += 1
        elif pred == "yes":
            fp += 1
        elif pred == "no":
            tn += 1
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "n": n,
        "tp": tp,
        "fp": fp,
        "tn": tn,
        "fn": fn,
        "accuracy": (tp + tn) / n if n else 0.0,
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "yes_ratio": (tp + fp) / n if n else 0.0,
        "unknown_ratio": unknown / n if n else 0.0,
    }


def headline(kind: str, metrics: Mapping[str, Any]) -> tuple[str, float]:
    """The name and value of the headline metric among one kind's :func:`kind_metrics`.

    >>> headline("text", {"n": 2, "vqa_accuracy": 0.8, "unknown_ratio": 0.0})
    ('vqa_accuracy', 0.8)
    """
    name = next(
        (k for k in _SPECIAL if metrics.get(k) is not None), METRIC_NAMES.get(kind, "accuracy")
    )
    return name, metrics[name]


_SPECIAL = ("circular_accuracy", "vqa_accuracy")


def _circular(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """MMBench's CircularEval over the rows that are rotations (they have a ``group``).

    A question counts once all its rotations (``rotations``, numbered by ``rotation``) have a
    verdict, and is right when every one is; questions with rotations missing (an unfinished
    run) are left out and counted in ``circular_incomplete``. ``circular_accuracy`` is None
    when no question is complete.
    """
    questions: dict[str, tuple[int, dict[int, float]]] = {}
    for row in group:
        if row.get("group") is None:
            continue  # not a rotation
        try:
            key, expected, rotation = str(row["group"]), int(row["rotations"]), int(row["rotation"])
        except (KeyError, TypeError, ValueError):
            continue  # not a rotation a run of this version wrote
        questions.setdefault(key, (expected, {}))[1][rotation] = float(row["credit"])
    if not questions:
        return {}
    complete = [seen for expected, seen in questions.values() if len(seen) >= expected]
    right = sum(1 for seen in complete if all(c >= 1.0 for c in seen.values()))
    return {
        "circular_accuracy": right / len(complete) if complete else None,
        "circular_questions": len(complete),
        "circular_incomplete": len(questions) - len(complete),
    }


def kind_metrics(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Metrics per answer kind from per-sample verdict rows.

    Each row has ``kind``, ``credit``, ``prediction`` (canonical) and ``gold_canonical``, and
    ``references`` (the human answers) when it has several, ``group`` when it is a rotation
    of a multiple-choice question (:mod:`~mai_graph.eval.circular`). ``choice`` → accuracy
    (per rotation), and MMBench's circular accuracy when rotated; ``yes_no`` →
    :func:`pope_metrics`; ``number`` → relaxed accuracy; ``text`` → exact match, or the VQA
    accuracy when some question has several human answers.
    """
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for kind, group in sorted(by_kind.items()):
        n = len(group)
        right = sum(r["credit"] for r in group)
        name = METRIC_NAMES.get(kind, "accuracy")
        if kind == "text" and any(len(r.get("references") or ()) > 1 for r in group):
            name = "vqa_accuracy"
        if kind == "yes_no":
            metrics = pope_metrics((r["prediction"], r["gold_canonical"]) for r in group)
        else:
            metrics = {"n": n, name: right / n}
            if kind == "choice":
                metrics.update(_circular(group))
            metrics["unknown_ratio"] = sum(1 for r in group if r["prediction"] == UNKNOWN) / n
        out[kind] = metrics
    return out
