"""Python entry points: ``run`` / ``arun`` -> :class:`MAIResult`."""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mai_graph.backends.base import VLMBackend, check_backend
from mai_graph.context import MAIContext
from mai_graph.graph import create_mai_graph
from mai_graph.loop import run_sync
from mai_graph.metrics import totals
from mai_graph.state import InputState, NodeMetrics, Sparsification

__all__ = ["MAIResult", "arun", "run"]


@dataclass(frozen=True)
class MAIResult:
    """The outcome of one MAI run."""

    answer: str
    """The final answer text, as the answering model wrote it."""
    canonical: str
    """Its canonical form (option letter, yes/no, number, normalized text, or ``unknown``)."""
    route: str
    """How the run ended; see :data:`mai_graph.state.Route`."""
    metrics: list[NodeMetrics]
    """One record per model call, in call order."""
    wall_s: float
    """Wall time of the whole run, orchestration included."""
    small_answer: str | None = None
    large_answer: str | None = None
    s2_answer: str | None = None
    sparsification: Sparsification | None = None
    totals: dict[str, float] = field(default_factory=dict)
    """Sums over ``metrics``: calls, prompt / cached / generated tokens, model seconds."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


_GRAPHS: weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary[Any, Any]] = (
    weakref.WeakKeyDictionary()
)


def _compiled(small: VLMBackend, large: VLMBackend) -> Any:
    """The compiled graph of a backend pair, built once per pair."""
    try:
        by_large = _GRAPHS.setdefault(small, weakref.WeakKeyDictionary())
        graph = by_large.get(large)
        if graph is None:
            graph = by_large[large] = create_mai_graph(small, large).compile(name="mai")
        return graph
    except TypeError:  # backends that cannot be weakly referenced: compile each time
        return create_mai_graph(small, large).compile(name="mai")


def _inputs(question: str, image: Any, options: Sequence[str] | None) -> InputState:
    # Every input key is written, None included: on a reused thread nothing is inherited.
    return InputState(
        question=question, image=image, options=list(options) if options is not None else None
    )


async def arun(
    question: str,
    image: Any = None,
    *,
    small: VLMBackend,
    large: VLMBackend,
    options: Sequence[str] | None = None,
    context: MAIContext | dict[str, Any] | None = None,
    **settings: Any,
) -> MAIResult:
    """Answer one question with MAI.

    Args:
        question: The question text.
        image: A path, data URL, bytes, PIL image or :class:`~mai_graph.images.ImageRef`.
        small: The small model's backend.
        large: The large model's backend.
        options: Multiple-choice option texts (letters A, B, ... are added).
        context: A :class:`MAIContext` or a dict of its fields.
        **settings: Context fields given directly (``policy="large"``, ``keep_ratio=0.3``);
            they override ``context``.

    Returns:
        The :class:`MAIResult`.
    """
    check_backend(small, "small")
    check_backend(large, "large")
    ctx = MAIContext.coerce(context)
    if settings:
        ctx = MAIContext.coerce({**asdict(ctx), **settings})
    start = time.perf_counter()
    out = await _compiled(small, large).ainvoke(_inputs(question, image, options), context=ctx)
    return _result(out, time.perf_counter() - start)


def run(
    question: str,
    image: Any = None,
    *,
    small: VLMBackend,
    large: VLMBackend,
    options: Sequence[str] | None = None,
    context: MAIContext | dict[str, Any] | None = None,
    **settings: Any,
) -> MAIResult:
    """Sync :func:`arun` (runs on mai-graph's background loop, so engines stay on one loop).

    Example:
        >>> from mai_graph import ScriptedBackend, run
        >>> small = ScriptedBackend({"short": "A"}, name="small")
        >>> large = ScriptedBackend({"short": "A"}, name="large")
        >>> run("Which?", options=["x", "y"], small=small, large=large).route
        'agree'
    """
    return run_sync(
        arun(
            question, image, small=small, large=large, options=options, context=context,
            **settings,
        )
    )  # fmt: skip


def _result(out: dict[str, Any], wall_s: float) -> MAIResult:
    metrics = list(out.get("metrics") or [])
    return MAIResult(
        answer=out["answer"],
        canonical=out["canonical"],
        route=out["route"],
        metrics=metrics,
        wall_s=wall_s,
        small_answer=out.get("small_answer"),
        large_answer=out.get("large_answer"),
        s2_answer=out.get("s2_answer"),
        sparsification=out.get("sparsification"),
        totals=totals(metrics),
    )
