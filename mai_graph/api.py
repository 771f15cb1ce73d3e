"""Python entry points: ``run`` / ``arun`` -> :class:`MAIResult`."""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from typing import Any, cast

from mai_graph import tracing
from mai_graph.answers import Options, normalize_options
from mai_graph.backends.base import VLMBackend, check_backend
from mai_graph.context import MAIContext
from mai_graph.graph import create_mai_graph
from mai_graph.loop import run_sync
from mai_graph.result import MAIResult
from mai_graph.state import InputState

__all__ = ["MAIResult", "arun", "run"]

Models = VLMBackend | Sequence[VLMBackend]
"""One backend, or several (drafters for ``small``, a chain for ``large``)."""


_CACHE_ATTR = "_mai_compiled_graph"
"""Where a lineup's compiled graph is kept: on its first small backend, so that the graph, which
holds its backends, lives exactly as long as they do (a module-level map would keep every
lineup ever run alive: its values would hold its keys)."""
_KEPT_PER_BACKEND = 8
"""Lineups a backend keeps graphs for (it may open several: one small model, many large)."""


def _compiled(small: Models, large: Models) -> Any:
    """The compiled graph of a lineup (a pair, drafters, a chain), built once while it lives.

    The graph is kept on the first small backend with weak references to the others: when the
    caller drops the backends, backend and graph are one unreachable cycle and Python's
    collector frees them. A backend without an instance dict (``__slots__``) or weak
    references compiles each time.
    """
    drafters, chain = _as_list(small), _as_list(large)
    owner, lineup = drafters[0], [*drafters, None, *chain]  # None: where the drafters end
    key = tuple(id(b) for b in lineup)  # the owner's too: a copy of it shares its dict
    state = getattr(owner, "__dict__", None)
    kept = state.setdefault(_CACHE_ATTR, {}) if isinstance(state, dict) else {}
    found = kept.get(key)  # from the instance's own dict: never a wrapped backend's
    if found is not None and all(r() is not None for r in found[0]):
        return found[1]
    graph = (
        create_mai_graph(drafters, *chain) if _many(small) or _many(large)
        else create_mai_graph(drafters[0], chain[0])
    ).compile(name="mai")  # fmt: skip
    try:
        refs = [weakref.ref(b) for b in lineup if b is not None]
    except TypeError:
        return graph
    for stale in [k for k, (rs, _) in kept.items() if any(r() is None for r in rs)]:
        del kept[stale]
    while len(kept) >= _KEPT_PER_BACKEND:
        del kept[next(iter(kept))]  # the oldest
    kept[key] = (refs, graph)
    return graph


def _inputs(
    question: str, image: Any, options: Options | None, images: Any = None, video: Any = None
) -> InputState:
    # Every input key is written, None included: on a reused thread nothing is inherited.
    inputs = InputState(question=question, image=image, options=normalize_options(options))
    if images is not None:  # the first node checks it is a list
        inputs["images"] = list(images) if isinstance(images, tuple) else images
    if video is not None:
        inputs["video"] = video
    return inputs


def _many(models: Any) -> bool:
    return isinstance(models, Sequence) and not isinstance(models, str | bytes)


def _as_list(models: Models) -> list[VLMBackend]:
    return list(cast(Sequence[VLMBackend], models)) if _many(models) else [cast(VLMBackend, models)]


def _check(small: Models, large: Models) -> None:
    for name, models in (("small", small), ("large", large)):
        if _many(models):
            for i, b in enumerate(_as_list(models)):
                check_backend(b, f"{name}[{i}]")
        else:
            check_backend(models, name)


async def arun(
    question: str,
    image: Any = None,
    *,
    small: Models,
    large: Models,
    images: Sequence[Any] | None = None,
    video: Any = None,
    options: Options | None = None,
    context: MAIContext | dict[str, Any] | None = None,
    **settings: Any,
) -> MAIResult:
    """Answer one question with MAI.

    Args:
        question: The question text.
        image: A path, data URL, bytes, PIL image or :class:`~mai_graph.inputs.images.ImageRef`.
        small: The small model's backend, or several drafter backends (see
            :func:`~mai_graph.graph.create_mai_graph`).
        large: The large model's backend, or a chain of larger backends, smallest first.
        images: Several images, in order (after ``image``, if given).
        video: A video file, data URL, or its frames (see :mod:`mai_graph.inputs.video`).
        options: Multiple-choice options: a mapping letter → text (``{"A": "cat", "B":
            "dog"}``), or a list of texts lettered A, B, ... in order.
        context: A :class:`MAIContext` or a dict of its fields.
        **settings: Context fields given directly (``policy="large"``, ``keep_ratio=0.3``);
            they override ``context``.

    Returns:
        The :class:`MAIResult`.
    """
    _check(small, large)
    ctx = MAIContext.coerce(context)
    if settings:
        ctx = ctx.replace(**settings)
    start = time.perf_counter()
    inputs = _inputs(question, image, options, images, video)
    with tracing.run_span("python", ctx) as span:
        out = await _compiled(small, large).ainvoke(inputs, context=ctx)
        tracing.finish_run(span, out)
    return MAIResult.from_output(out, time.perf_counter() - start)


def run(
    question: str,
    image: Any = None,
    *,
    small: Models,
    large: Models,
    images: Sequence[Any] | None = None,
    video: Any = None,
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
            question, image, small=small, large=large, images=images, video=video,
            options=options, context=context, **settings,
        )
    )  # fmt: skip
