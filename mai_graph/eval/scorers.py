"""Scoring against gold answers, on the gate's canonicalization (:mod:`mai_graph.answers`).

Per kind, following the benchmarks' usual conventions:

- ``choice`` (MMBench-style): accuracy; an answer no option letter can be read from is wrong.
- ``yes_no`` (POPE): accuracy, precision, recall and F1 of "yes", and the yes-ratio. An answer
  that is neither yes nor no is wrong and counts as not-yes (it lowers recall, never
  precision); its share is reported as ``unknown_ratio``.
- ``number`` (ChartQA): relaxed accuracy, right within 5% of the gold value; years, dates and
  times must match exactly.
- ``text`` (VQA): exact match after VQA normalization (case, punctuation, articles, number
  words).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mai_graph.answers import UNKNOWN, extract_answer, match_gold

__all__ = [
    "GOLD_REL_TOL",
    "METRIC_NAMES",
    "Verdict",
    "kind_metrics",
    "pope_metrics",
    "score",
]

GOLD_REL_TOL = 0.05
"""ChartQA's relaxed-accuracy tolerance (independent of the gate's ``rel_tol``)."""

METRIC_NAMES = {
    "choice": "accuracy",
    "yes_no": "accuracy",
    "number": "relaxed_accuracy",
    "text": "exact_match",
}
"""The headline metric of each kind (all are the mean of per-sample verdicts)."""


@dataclass(frozen=True)
class Verdict:
    """Whether one prediction is right, and the canonical forms compared."""

    correct: bool
    prediction: str
    """The canonical prediction (:data:`~mai_graph.answers.UNKNOWN` if unreadable)."""


def score(
    prediction: str, gold: str, kind: str, options: Mapping[str, str] | None = None
) -> Verdict:
    """Score one model answer against its gold answer.

    >>> score("The answer is (B).", "B", "choice", {"A": "cat", "B": "dog"}).correct
    True
    >>> score("About 104", "100", "number").correct, score("2020", "2019", "number").correct
    (True, False)
    """
    canonical = extract_answer(prediction, kind, options)
    correct = canonical != UNKNOWN and match_gold(
        prediction, gold, kind, options=options, rel_tol=GOLD_REL_TOL
    )
    return Verdict(bool(correct), canonical)


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


def kind_metrics(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Metrics per answer kind from per-sample verdict rows.

    Each row has ``kind``, ``correct``, ``prediction`` (canonical) and ``gold_canonical``.
    ``choice`` → accuracy; ``yes_no`` → :func:`pope_metrics`; ``number`` → relaxed accuracy;
    ``text`` → exact match.
    """
    by_kind: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row)
    out: dict[str, dict[str, Any]] = {}
    for kind, group in sorted(by_kind.items()):
        n = len(group)
        right = sum(1 for r in group if r["correct"])
        if kind == "yes_no":
            metrics = pope_metrics((r["prediction"], r["gold_canonical"]) for r in group)
        else:
            metrics = {"n": n, METRIC_NAMES.get(kind, "accuracy"): right / n}
            metrics["unknown_ratio"] = sum(1 for r in group if r["prediction"] == UNKNOWN) / n
        out[kind] = metrics
    return out
