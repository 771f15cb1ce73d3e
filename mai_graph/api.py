"""Python entry points, each returning a :class:`MAIResult`.

:class:`MAI` owns a lineup's compiled graph and answers many questions with it; ``run`` /
``arun`` answer one and keep nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from mai_graph import tracing
from mai_graph.answers import Options, normalize_options
from mai_graph.backends.base import VLMBackend, check_backend
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.graph import create_mai_graph
from mai_graph.loop import run_sync
from mai_graph.result import MAIResult
from mai_graph.state import InputState

__all__ = ["MAI", "MAIResult", "arun", "run"]

Models = VLMBackend | Sequence[VLMBackend]
"""One backend, or several (drafters for ``small``, a chain for ``large``)."""


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


class MAI:
    """A lineup and its compiled graph: built once, it answers any number of questions.

    ``MAI(small, large)`` (or drafters and a chain: ``MAI([d1, d2], [m1, m2])``,
    ``MAI(small, large, larger)``) compiles the graph of :func:`~mai_graph.graph.create_mai_graph`
    once; :meth:`run` and :meth:`arun` answer questions with it; :meth:`close` shuts the
    backends' engines down and lets the graph go (also on leaving a ``with`` block). Nothing is
    kept anywhere else: dropping the object (after closing it) frees its graph and backends.
    ``graph`` is the compiled LangGraph graph, to compose into your own.

    Args:
        small: The small model's backend, or several drafter backends.
        large: The large model's backend, or a chain of larger backends, smallest first.
        *larger: Further models of a chain, in increasing size.
        checkpointer: A LangGraph checkpointer to compile with (needed for ``review``).
        **graph_options: Further arguments of :func:`~mai_graph.graph.create_mai_graph`
            (``retry_policy``, ``timeouts``, ``scorers``, ``review``, ``image_policy``).

    Example:
        >>> from mai_graph import MAI, ScriptedBackend
        >>> with MAI(ScriptedBackend({"short": "A"}), ScriptedBackend({"short": "A"})) as mai:
        ...     [mai.run("Which?", options=["x", "y"]).route for _ in range(2)]
        ['agree', 'agree']
    """

    def __init__(
        self,
        small: Models,
        large: Models,
        *larger: VLMBackend,
        checkpointer: Any = None,
        **graph_options: Any,
    ) -> None:
        _check(small, large, larger)
        self.backends: tuple[VLMBackend, ...] = (*_as_list(small), *_as_list(large), *larger)
        """Every backend of the lineup, drafters first (what :meth:`close` shuts down)."""
        self.graph: Any = create_mai_graph(small, large, *larger, **graph_options).compile(
            name="mai", checkpointer=checkpointer
        )
        """The compiled graph (``None`` once closed)."""

    async def arun(
        self,
        question: str,
        image: Any = None,
        *,
        images: Sequence[Any] | None = None,
        video: Any = None,
        options: Options | None = None,
        context: MAIContext | dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        **settings: Any,
    ) -> MAIResult:
        """Answer one question; the arguments are :func:`arun`'s.

        ``config`` is LangGraph's run config, e.g. ``{"configurable": {"thread_id": ...}}``
        with a checkpointer.

        Raises:
            ConfigError: This MAI was closed.
        """
        graph = self._open()
        ctx = MAIContext.coerce(context)
        if settings:
            ctx = ctx.replace(**settings)
        start = time.perf_counter()
        inputs = _inputs(question, image, options, images, video)
        with tracing.run_span("python", ctx) as span:
            out = await graph.ainvoke(inputs, config=config, context=ctx)
            tracing.finish_run(span, out)
        return MAIResult.from_output(out, time.perf_counter() - start)

    def run(
        self,
        question: str,
        image: Any = None,
        *,
        images: Sequence[Any] | None = None,
        video: Any = None,
        options: Options | None = None,
        context: MAIContext | dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        **settings: Any,
    ) -> MAIResult:
        """Sync :meth:`arun`, on mai-graph's background loop (engines stay on one loop)."""
        return run_sync(
            self.arun(
                question, image, images=images, video=video, options=options, context=context,
                config=config, **settings,
            )
        )  # fmt: skip

    def close(self) -> None:
        """Shut the backends' engines down and let the graph go; idempotent."""
        from mai_graph.backends.lifecycle import shutdown_backends

        self.graph = None
        shutdown_backends(*self.backends)

    def __enter__(self) -> MAI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> MAI:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> Any:
        if self.graph is None:
            raise ConfigError(
                "this MAI was closed: its engines are shut down",
                parameter="MAI",
                fix="build a new MAI(small, large) with started backends",
            )
        return self.graph


def _check(small: Models, large: Models, larger: Sequence[Any] = ()) -> None:
    for name, models in (("small", small), ("large", large)):
        if _many(models):
            for i, b in enumerate(_as_list(models)):
                check_backend(b, f"{name}[{i}]")
        else:
            check_backend(models, name)
    for i, b in enumerate(larger):
        check_backend(b, f"larger[{i}]")


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

    One-shot: the graph is built for this question and nothing is kept; to answer many,
    build a :class:`MAI` once.

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
    return await MAI(small, large).arun(
        question, image, images=images, video=video, options=options, context=context,
        **settings,
    )  # fmt: skip


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

    One-shot, like :func:`arun`: to answer many questions, build a :class:`MAI` once.

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
