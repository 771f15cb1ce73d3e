"""Python entry points: ``run`` / ``arun`` -> :class:`MAIResult`."""

from __future__ import annotations

import time
import weakref
from typing import Any

from mai_graph.answers import Options, normalize_options
from mai_graph.backends.base import VLMBackend, check_backend
from mai_graph.context import MAIContext
from mai_graph.graph import create_mai_graph
from mai_graph.loop import run_sync
from mai_graph.result import MAIResult
from mai_graph.state import InputState

__all__ = ["MAIResult", "arun", "run"]


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


def _inputs(question: str, image: Any, options: Options | None) -> InputState:
    # Every input key is written, None included: on a reused thread nothing is inherited.
    return InputState(question=question, image=image, options=normalize_options(options))


async def arun(
    question: str,
    image: Any = None,
    *,
    small: VLMBackend,
    large: VLMBackend,
    options: Options | None = None,
    context: MAIContext | dict[str, Any] | None = None,
    **settings: Any,
) -> MAIResult:
    """Answer one question with MAI.

    Args:
        question: The question text.
        image: A path, data URL, bytes, PIL image or :class:`~mai_graph.images.ImageRef`.
        small: The small model's backend.
        large: The large model's backend.
        options: Multiple-choice options: a mapping letter → text (``{"A": "cat", "B":
            "dog"}``), or a list of texts lettered A, B, ... in order.
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
        ctx = ctx.replace(**settings)
    start = time.perf_counter()
    out = await _compiled(small, large).ainvoke(_inputs(question, image, options), context=ctx)
    return MAIResult.from_output(out, time.perf_counter() - start)


def run(
    question: str,
    image: Any = None,
    *,
    small: VLMBackend,
    large: VLMBackend,
    options: Options | None = None,
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
