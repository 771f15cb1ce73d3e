"""Per-call metrics: the state reducer and run totals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["RESET_METRICS", "merge_metrics", "totals"]

RESET_METRICS: dict[str, Any] = {"node": "__reset__"}
"""A record that clears the metrics gathered so far (the first node of each run writes it, so
a thread reused for a new question starts from an empty list)."""


def merge_metrics(left: Sequence[Any] | None, right: Sequence[Any] | None) -> list[Any]:
    """Reducer of ``MAIState.metrics``: append, or start over after a :data:`RESET_METRICS`.

    >>> merge_metrics([{"node": "a"}], [RESET_METRICS, {"node": "b"}])
    [{'node': 'b'}]
    """
    right = list(right or ())
    for i in range(len(right) - 1, -1, -1):
        if right[i].get("node") == RESET_METRICS["node"]:
            return right[i + 1 :]
    return [*(left or ()), *right]


def totals(records: Sequence[Any]) -> dict[str, float]:
    """Sums over records: prompt / cached / generated tokens, model-call seconds, calls."""
    return {
        "calls": len(records),
        "prompt_tokens": sum(r["prompt_tokens"] for r in records),
        "cached_tokens": sum(r["cached_tokens"] or 0 for r in records),
        "generated_tokens": sum(r["generated_tokens"] for r in records),
        "model_latency_s": sum(r["latency_s"] for r in records),
    }
