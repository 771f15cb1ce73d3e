"""The graph's typed state: what goes in, what each node adds, what comes out."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired, get_type_hints

from pydantic import Field
from typing_extensions import TypedDict

from mai_graph.answers.kinds import AnswerKind
from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.video import VideoRef

__all__ = [
    "Draft",
    "InputState",
    "MAIState",
    "NodeMetrics",
    "OutputState",
    "Question",
    "Reasoning",
    "Route",
    "Sparsification",
    "run_keys",
]

Route = Literal[
    "agree",
    "extract_agree",
    "large_confident",
    "transfer",
    "small",
    "large",
    "small_cot",
    "large_cot",
    "human",
]
"""How a run ended.

- ``agree``: the small and large short answers matched (mutual verification).
- ``extract_agree``: the small model's S2 answer matched the large short answer.
- ``large_confident``: the answers differed but the large model was confident enough
  (``MAIContext.large_confident_exit``).
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
    queue_s: NotRequired[float | None]
    """The engine's own stage timings (None where the backend cannot give them; absent from
    records written before they existed): the wait before the engine scheduled the call."""
    prefill_s: NotRequired[float | None]
    """Scheduled to first token: the prefill, vision encoding included, net of queueing."""
    decode_s: NotRequired[float | None]
    """First token to last token."""
    image_tokens: NotRequired[int | None]
    """Prompt tokens that stand for images and video frames."""
    stage: NotRequired[int]
    """Graphs over a chain of models: the stage of the call (stage ``s`` pairs the chain's
    model ``s - 1`` as ``small`` with model ``s`` as ``large``)."""
    drafter: NotRequired[int]
    """Runs with several drafts: which draft made the call (its position in ``drafts``)."""
    finish_reason: str
    answer_prob: float | None
    """For answer calls (short, S2, transfer answer): the model's probability for the text it
    answered, ``exp(sum(logprobs))``; None for reasoning or when the backend gives no logprobs."""
    text: NotRequired[str]
    """What this call generated, recorded at the call (each draft's and each stage's own)."""
    distribution: NotRequired[dict[str, float] | None]
    """Short answers to bounded questions: the model's probability of each allowed answer
    (option letter, yes / no), read off one decode step; None where it was not asked for."""
    distribution_fallback: NotRequired[str | None]
    """Why a short answer that asked for a distribution was generated instead."""


class Sparsification(TypedDict):
    """What the sparsify node kept of the small model's reasoning."""

    strategy: str
    tokens_in: int
    tokens_out: int
    kept_ratio: float
    dropped_mass: float
    """Share of the importance mass that was dropped (0 when everything is kept)."""
    scoring_s: float
    masked_tokens: NotRequired[int]
    """With ``transfer_mask_answer``: tokens of the stated final answer left out."""


class InputState(TypedDict):
    """What a run needs.

    The first node consumes these keys into ``asked`` (and clears them), so on a reused
    thread every run uses only what its own input gives: a run without ``image`` has no image,
    whatever the previous run on the thread was given.
    """

    question: Annotated[str, Field(description="The question about the image.")]
    image: NotRequired[
        Annotated[
            ImageRef | str | None,
            Field(
                description="The image: a data URL (data:image/png;base64,...) or plain base64 "
                "of a PNG / JPEG file, or a file path the server may read (allowed roots)."
            ),
        ]
    ]
    """A file path, a ``data:image/...;base64,`` URL, or an :class:`ImageRef`; the first node
    turns it into a reference."""
    images: NotRequired[
        Annotated[
            list[ImageRef | str] | None,
            Field(
                description="Several images, in order (before/after, charts to compare): each "
                "a data URL, plain base64, or a file path the server may read. With image, "
                "that one comes first."
            ),
        ]
    ]
    """Several images, in the order the model sees them (after ``image``, if both are given)."""
    video: NotRequired[
        Annotated[
            VideoRef | str | list[str] | dict[str, Any] | None,
            Field(
                description="A short video: a data URL (data:video/mp4;base64,...) or a file "
                "path the server may read, or its frames as a list of images (or "
                '{"frames": [...], "fps": 2}). Frames are sampled by video_fps and max_frames.'
            ),
        ]
    ]
    """A video file, its frames, or a :class:`~mai_graph.inputs.video.VideoRef`; the first node
    samples its frames (``video_fps``, ``max_frames``) and keeps a reference."""
    options: NotRequired[
        Annotated[
            Mapping[str, str] | list[str] | None,
            Field(
                description='Multiple-choice options: {"A": "cat", "B": "dog"} (letters kept) '
                'or ["cat", "dog"] (lettered A, B, ...); leave empty for an open question.'
            ),
        ]
    ]
    """Multiple-choice options: a mapping letter → text (``{"A": "cat", "B": "dog"}``, letters
    kept), or a list of texts lettered A, B, ... in order. The first node stores the mapping."""


class Question(TypedDict):
    """A run's question as its first node validated it: the one form every later node reads.

    ``prepare`` turns the untrusted :class:`InputState` into this record once
    (:func:`mai_graph.calls.read_question`: media resolved to references, options lettered, the
    answer kind resolved) and keeps it in state as ``asked``; nodes build their calls from it
    (:mod:`mai_graph.calls`) without validating again. JSON-friendly, like all of the state, so
    checkpointers and Studio keep it as is.
    """

    question: str
    image: ImageRef | None
    """The first image (None without images)."""
    images: NotRequired[list[ImageRef]]
    """Every image, in order (the first is ``image``); absent without images."""
    videos: NotRequired[list[VideoRef]]
    """The video, when there is one (a list, as engines count media per kind)."""
    options: dict[str, str] | None
    """Option letter → option text, in display order."""
    kind: AnswerKind
    """How the answer is read: the run's ``answer_kind``, ``auto`` made ``choice`` by options."""


class Reasoning(TypedDict):
    """What the reasoning path adds: a run's (in :class:`MAIState`) or one draft's."""

    reasoning: NotRequired[str]
    """Chain of thought (reason)."""
    reasoning_token_ids: NotRequired[list[int]]
    reasoning_tokens: NotRequired[list[str] | None]
    """Text piece of each reasoning token (what scorers score)."""
    reasoning_logprobs: NotRequired[list[float] | None]
    s2_answer: NotRequired[str]
    """Answer extracted in a second turn over the cached reasoning (extract)."""
    s2_canonical: NotRequired[str]
    s2_prob: NotRequired[float | None]
    transfer: NotRequired[str]
    """The sparsified reasoning the large model reads (sparsify)."""
    transfer_token_ids: NotRequired[list[int] | None]
    """Its token ids, when small and large share a tokenizer (spliced into the prompt as is)."""


class Draft(Reasoning):
    """One draft of a run with several drafts (drafter models, or samples of one small model).

    Its reasoning keys are filled when the run escalated; ``transfer`` when the large model
    reads it (``transfer_drafts`` > 1).
    """

    drafter: int
    """Its position in the run's drafts."""
    model: str
    """The drafting model's backend name."""
    answer: str
    """Its short answer (verify)."""
    canonical: str
    prob: float | None
    rank: NotRequired[int]
    """Its place in the ranking of reasonings (0 = best; ``draft_rank``)."""


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
    small_prob: NotRequired[float | None]
    large_prob: NotRequired[float | None]
    small_distribution: NotRequired[dict[str, float] | None]
    large_distribution: NotRequired[dict[str, float] | None]
    s2_answer: NotRequired[str]
    sparsification: NotRequired[Sparsification]
    transfer: NotRequired[str]
    """Transfer runs: the sparsified reasoning the large model read."""
    stage: NotRequired[int]
    """Graphs over a chain of models: the stage that ended the run (stage ``s`` pairs the
    chain's model ``s - 1`` with model ``s``; 1 is the first, smallest pair)."""
    drafts: NotRequired[list[Draft]]
    """Runs with several drafts: each draft's answers (and reasoning, when it escalated)."""


class MAIState(InputState, Reasoning):
    """The full state; later nodes fill the ``NotRequired`` keys."""

    asked: NotRequired[Question]
    """This run's question as the first node validated it (what every later node reads)."""
    small_answer: NotRequired[str]
    """Small model's short answer (verify)."""
    small_canonical: NotRequired[str]
    large_answer: NotRequired[str]
    """Large model's short answer (verify)."""
    large_canonical: NotRequired[str]
    small_prob: NotRequired[float | None]
    """Small model's probability for its short answer (None without logprobs)."""
    large_prob: NotRequired[float | None]
    """Large model's probability for its short answer (None without logprobs)."""
    small_distribution: NotRequired[dict[str, float] | None]
    """Bounded questions: the small model's probability of each allowed answer at
    verification (None where the backend generated instead; see the call's record)."""
    large_distribution: NotRequired[dict[str, float] | None]
    """Bounded questions: the large model's probability of each allowed answer."""
    sparsification: NotRequired[Sparsification]
    drafts: NotRequired[list[Draft]]
    """Runs with several drafts: each draft's short answer, reasoning and S2 answer."""
    stage: NotRequired[int]
    """Graphs over a chain of models: the current stage (1 = the first, smallest pair)."""
    answer: NotRequired[str]
    canonical: NotRequired[str]
    route: NotRequired[Route]
    metrics: Annotated[list[NodeMetrics], operator.add]
    """One record per model call of this run (the first node starts the list anew with
    LangGraph's ``Overwrite``, so a reused thread never mixes runs)."""


def run_keys() -> tuple[str, ...]:
    """The keys a run fills: every state key that is neither an input nor the metrics list.

    The first node clears those a previous run on the same thread left behind.
    """
    inputs = set(get_type_hints(InputState))
    return tuple(k for k in get_type_hints(MAIState) if k not in inputs and k != "metrics")
