"""The graph's typed state: what goes in, what each node adds, what comes out."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from typing_extensions import TypedDict

from mai_graph.images import ImageRef
from mai_graph.metrics import merge_metrics

__all__ = ["InputState", "MAIState", "NodeMetrics", "OutputState", "Route", "Sparsification"]

Route = Literal[
    "agree", "extract_agree", "transfer", "small", "large", "small_cot", "large_cot", "human"
]
"""How a run ended.

- ``agree``: the small and large short answers matched (mutual verification).
- ``extract_agree``: the small model's S2 answer matched the large short answer.
- ``transfer``: the large model answered after reading the small model's sparsified reasoning.
- ``small`` / ``large``: baseline, one short answer from that model.
- ``small_cot`` / ``large_cot``: baseline, that model reasoned and its S2 answer was taken.
- ``human``: a reviewer gave the answer (graphs built with ``review=True``).
"""


class NodeMetrics(TypedDict):
    """One model call."""

    node: str
    """Graph node that made the call (``verify``, ``reason``, ``extract``, ``answer``)."""
    model: str
    """Backend name (model id or path)."""
    role: Literal["small", "large"]
    prompt_tokens: int
    cached_tokens: int | None
    """Prompt tokens served from the engine's prefix cache (None if the backend cannot tell)."""
    generated_tokens: int
    latency_s: float
    ttft_s: float | None
    """Time to first token, when the backend reports it."""
    finish_reason: str


class Sparsification(TypedDict):
    """What the sparsify node kept of the small model's reasoning."""

    strategy: str
    tokens_in: int
    tokens_out: int
    kept_ratio: float
    dropped_mass: float
    """Share of the importance mass that was dropped (0 when everything is kept)."""
    scoring_s: float


class InputState(TypedDict):
    """What a run needs.

    On a thread reused for a new question, pass ``image`` and ``options`` explicitly (``None``
    to clear them): LangGraph keeps state keys the new input does not mention.
    """

    question: str
    image: NotRequired[ImageRef | str | None]
    """An :class:`ImageRef`, or a path / data URL that the first node turns into one."""
    options: NotRequired[list[str] | None]
    """Multiple-choice option texts, in letter order (A, B, ...)."""


class OutputState(TypedDict):
    """What a run returns."""

    answer: str
    """The chosen model text of the final answer."""
    canonical: str
    """The canonical form of ``answer`` (see :mod:`mai_graph.answers`)."""
    route: Route
    metrics: list[NodeMetrics]
    small_answer: NotRequired[str]
    large_answer: NotRequired[str]
    s2_answer: NotRequired[str]
    sparsification: NotRequired[Sparsification]


class MAIState(InputState):
    """The full state; later nodes fill the ``NotRequired`` keys."""

    small_answer: NotRequired[str]
    """Small model's short answer (verify)."""
    small_canonical: NotRequired[str]
    large_answer: NotRequired[str]
    """Large model's short answer (verify)."""
    large_canonical: NotRequired[str]
    reasoning: NotRequired[str]
    """Chain of thought (reason)."""
    reasoning_token_ids: NotRequired[list[int]]
    reasoning_tokens: NotRequired[list[str] | None]
    """Text piece of each reasoning token (what scorers score)."""
    reasoning_logprobs: NotRequired[list[float] | None]
    s2_answer: NotRequired[str]
    """Answer extracted in a second turn over the cached reasoning (extract)."""
    s2_canonical: NotRequired[str]
    transfer: NotRequired[str]
    """The sparsified reasoning the large model reads (sparsify)."""
    transfer_token_ids: NotRequired[list[int] | None]
    """Its token ids, when small and large share a tokenizer (spliced into the prompt as is)."""
    sparsification: NotRequired[Sparsification]
    answer: NotRequired[str]
    canonical: NotRequired[str]
    route: NotRequired[Route]
    metrics: Annotated[list[NodeMetrics], merge_metrics]
    """One record per model call of this run."""
