"""Does the large model read the transferred reasoning, or copy its answer?

On MAI's transfer route the large model answers after reading the small model's sparsified
reasoning. Two numbers say what that reading did:

- the **transfer gain**: accuracy of the transfer answer minus the accuracy the large model's
  own short answer had on the same runs;
- the **copy rate**: how often the transfer answer equals the small model's extracted (S2)
  answer, the large model's own short answer, or neither (``both`` when those two agree).

A receiver that answers from another model's reasoning often copies the answer it states
(measured for cross-model reasoning transfer in "Reasoning that Travels", arXiv 2605.28913).
The **masked** variant (``eval --branches --transfer-variants full,masked``) replays the same
runs with the stated final answer left out of the reasoning
(:mod:`mai_graph.scoring.mask`): a gain that survives the masking came from reading.

Computed from records alone: per policy and route for the runs that transferred, and, for runs
recorded with every branch, over every run whose two short answers disagreed (the runs MAI
would escalate under the paper's gate, whatever the S2 exit did).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mai_graph.context import MAIContext
from mai_graph.eval.records import CallRecord, SampleRun
from mai_graph.eval.replay import Branches, Outcome, ratio_key

__all__ = ["copy_source", "transfer_analysis"]


def copy_source(answer: str | None, small_s2: str | None, large_short: str | None) -> str:
    """Which earlier answer a transfer answer repeats (canonical forms compared).

    >>> copy_source("B", "B", "C"), copy_source("C", "B", "C"), copy_source("A", "B", "C")
    ('small', 'large', 'neither')
    >>> copy_source("B", "B", "B")
    'both'
    """
    a = (answer or "").strip()
    small = bool(a) and a == (small_s2 or "").strip()
    large = bool(a) and a == (large_short or "").strip()
    return "both" if small and large else "small" if small else "large" if large else "neither"


def _credit(run: SampleRun, call: CallRecord | None) -> float:
    return run.record.verdict((call.text or "") if call else "").credit


def _block(items: Sequence[tuple[SampleRun, CallRecord, CallRecord, CallRecord]]) -> dict[str, Any]:
    """Gain and copy shares of ``(run, large short, S2, transfer answer)`` tuples."""
    n = len(items)
    if not n:
        return {"n": 0}
    large = sum(_credit(r, vl) for r, vl, _, _ in items) / n
    small = sum(_credit(r, ex) for r, _, ex, _ in items) / n
    answer = sum(_credit(r, a) for r, _, _, a in items) / n
    copies: dict[str, int] = {"small": 0, "large": 0, "both": 0, "neither": 0}
    for _, vl, ex, a in items:
        copies[copy_source(a.canonical, ex.canonical, vl.canonical)] += 1
    return {
        "n": n,
        "large_short_accuracy": large,
        "small_s2_accuracy": small,
        "transfer_accuracy": answer,
        "gain": answer - large,
        "copy": {k: v / n for k, v in copies.items()},
    }


def _path_calls(out: Outcome) -> tuple[CallRecord | None, CallRecord | None, CallRecord | None]:
    vl = next((c for c in out.path if c.node == "verify" and c.role == "large"), None)
    ex = next((c for c in out.path if c.node == "extract"), None)
    answer = next((c for c in reversed(out.path) if c.node == "answer"), None)
    return vl, ex, answer


def transfer_analysis(
    runs: Sequence[SampleRun], outs: Sequence[Outcome], base: MAIContext
) -> dict[str, Any] | None:
    """Transfer gain and copy rates of one policy's runs (None when none transferred).

    Returns ``{"transferred": block, "masked": block | None, "disagreements": {...} | None}``;
    a block holds ``n``, the accuracies of the large short, S2 and transfer answers, ``gain``
    and the ``copy`` shares. ``masked`` replays the transferred runs with the masked answer
    (runs recorded with ``--transfer-variants full,masked``); ``disagreements`` covers every
    branch-recorded run whose short answers disagreed, with the full and masked answers.
    """
    key = ratio_key(base.keep_ratio)
    full: list[tuple[SampleRun, CallRecord, CallRecord, CallRecord]] = []
    masked: list[tuple[SampleRun, CallRecord, CallRecord, CallRecord]] = []
    apart_full: list[tuple[SampleRun, CallRecord, CallRecord, CallRecord]] = []
    apart_masked: list[tuple[SampleRun, CallRecord, CallRecord, CallRecord]] = []
    for run, out in zip(runs, outs):
        vl, ex, answer = _path_calls(out)
        if out.route == "transfer" and vl and ex and answer:
            full.append((run, vl, ex, answer))
        if not run.record.branches:
            continue
        b = Branches.of(run)
        hidden = b.masked.get(key)
        if out.route == "transfer" and hidden is not None:
            masked.append((run, b.large, b.extract, hidden))
        if (b.small.canonical or "") != (b.large.canonical or "") and key in b.answers:
            apart_full.append((run, b.large, b.extract, b.answers[key]))
            if hidden is not None:
                apart_masked.append((run, b.large, b.extract, hidden))
    if not full and not apart_full:
        return None
    return {
        "keep_ratio": key,
        "transferred": _block(full),
        "masked": _block(masked) if masked else None,
        "disagreements": {"full": _block(apart_full),
                          "masked": _block(apart_masked) if apart_masked else None}
        if apart_full
        else None,
    }  # fmt: skip
