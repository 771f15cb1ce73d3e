"""MAI as a LangChain decision model: ``Choice`` and ``Noul`` questions about images and text.

:class:`MAIDecisionModel` is a ``langchain_core.decisions.BaseDecisionModel``: it answers a
``ClassifierRequest`` (a state and typed questions) with MAI, so it drops in wherever LangChain
takes a decision model (``ModelRouterMiddleware``, a graph node, a chain). Each question is one
MAI run: a ``Choice`` is a multiple-choice question over its labels, a ``Noul`` a yes / no
question. The answer's probabilities are the distribution of the model whose answer MAI
returned, read off one decode step (:mod:`~mai_graph.answers.distribution`): the large model's
short answer when the models agreed (or it was sure), its answer after reading the small
model's reasoning on the transfer route. The response's ``metadata`` says, per question, which
model and call that was, the route, and each call's metrics record.

The state's text (strings, messages' text blocks, JSON values) is the context of every question;
its LangChain standard image blocks (``{"type": "image", "base64": ..., "mime_type": ...}``,
``{"type": "image", "url": ...}``, ``image_url`` parts) are the images, read once under the
image policy and shared by every question of the request: the first question's run fills the
engines' prefix cache with them, the others (run concurrently) read it.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.decisions import (
    BaseDecisionModel,
    Choice,
    ChoiceAnswer,
    ClassifierResponse,
    Noul,
    NoulAnswer,
)
from langchain_core.messages import BaseMessage, UsageMetadata
from pydantic import ConfigDict, Field, PrivateAttr

from mai_graph.adapters.langchain import image_source, lineup_names
from mai_graph.answers.distribution import around
from mai_graph.api import MAI
from mai_graph.errors import ConfigError
from mai_graph.inputs.sources import ImagePolicy, resolve_images
from mai_graph.lineup import Lineup
from mai_graph.loop import shared_loop
from mai_graph.result import MAIResult, reasoning_tokens, totals

__all__ = ["MAIClassifierResponse", "MAIDecisionModel"]

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

_ANSWERING = {
    "agree": ("verify", "large"),
    "large_confident": ("verify", "large"),
    "extract_agree": ("extract", "small"),
    "transfer": ("answer", "large"),
    "small": ("verify", "small"),
    "large": ("verify", "large"),
    "small_cot": ("extract", "small"),
    "large_cot": ("extract", "large"),
}
"""Per route, the call whose answer MAI returns: (node, role)."""


class MAIClassifierResponse(ClassifierResponse):
    """A :class:`ClassifierResponse` with what MAI did for each question."""

    metadata: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per question id: ``route``, ``answered_by`` (``small`` / ``large``) and ``call`` (the
    node whose answer was returned), ``distribution`` (``one_step``, or why the probabilities
    came from the answer's probability instead), and the run's per-call ``metrics``."""


MAX_STATE_DEPTH = 64
"""How deep a decision request's state (and a question's instructions) may nest."""

MAX_STATE_ITEMS = 100_000
"""How many values (every string, number, list, mapping and message, counted each time it is
reached) a state may hold."""


def _check_shape(value: Any, where: str, parameter: str) -> None:
    """Refuse a state too deep, holding itself, or too large, before anything recurses over it.

    Deeper than :data:`MAX_STATE_DEPTH` levels, or more than :data:`MAX_STATE_ITEMS` values.

    >>> loop: list[Any] = []
    >>> loop.append(loop)
    >>> try:
    ...     _check_shape(loop, "the state", "state")
    ... except ConfigError as exc:
    ...     print(str(exc).split(". Fix")[0])
    the state holds itself (a list inside itself), which has no text
    """
    fix = "pass a state without cycles: text, messages and JSON values"
    seen = 0
    path: set[int] = set()  # the containers on the way down (shared ones elsewhere are fine)
    # (value, depth, leaving): a container is pushed again to be taken off the path.
    stack: list[tuple[Any, int, bool]] = [(value, 0, False)]
    while stack:
        item, depth, leaving = stack.pop()
        if leaving:
            path.discard(id(item))
            continue
        seen += 1
        if seen > MAX_STATE_ITEMS:
            raise ConfigError(
                f"{where} holds more than {MAX_STATE_ITEMS:,} values",
                parameter=parameter,
                fix="pass a smaller state (the text and images the questions are about)",
            )
        if isinstance(item, BaseMessage):
            children: Any = [item.content]
        elif isinstance(item, Mapping):
            children = list(item.values())
        elif isinstance(item, Sequence) and not isinstance(item, str | bytes | bytearray):
            children = list(item)
        else:
            continue
        if id(item) in path:
            raise ConfigError(
                f"{where} holds itself (a {type(item).__name__} inside itself), which has no text",
                parameter=parameter,
                fix=fix,
            )
        if depth >= MAX_STATE_DEPTH:
            raise ConfigError(
                f"{where} nests deeper than {MAX_STATE_DEPTH} levels",
                parameter=parameter,
                value=depth,
                fix=f"pass a flatter state (at most {MAX_STATE_DEPTH} levels of lists, "
                "mappings and messages)",
            )
        path.add(id(item))
        stack.append((item, depth, True))
        stack.extend((child, depth + 1, False) for child in reversed(children))


def _content_text(value: Any, images: list[str], where: str) -> list[str]:
    """The text of a state value; image blocks go to ``images`` (see :func:`_check_shape`)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, BaseMessage):
        return _content_text(value.content, images, where)
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind in ("image", "image_url"):
            images.append(image_source(value))
            return []
        if kind == "text" and isinstance(value.get("text"), str):
            return [value["text"]]
        if kind in ("video", "video_url", "audio", "file"):
            raise ConfigError(
                f"{where} holds a {kind!r} block: MAIDecisionModel reads text and images",
                parameter="state",
                value=kind,
                fix="give the media as image blocks, or leave it out",
            )
        out: list[str] = []
        plain: dict[str, Any] = {}
        for key, item in value.items():
            inner = _content_text(item, images, where) if _has_media(item) else None
            if inner is None:
                plain[str(key)] = item
            else:
                out += inner
        if plain:
            out.insert(0, json.dumps(plain, ensure_ascii=False, default=str))
        return out
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return [t for item in value for t in _content_text(item, images, where)]
    return [json.dumps(value, default=str)]


def _has_media(value: Any) -> bool:
    if isinstance(value, BaseMessage):
        return True
    if isinstance(value, Mapping):
        return value.get("type") in ("image", "image_url", "text") or any(
            _has_media(v) for v in value.values()
        )
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray):
        return any(_has_media(v) for v in value)
    return False


def _instructions(content: Any) -> str:
    if isinstance(content, str):
        return content
    _check_shape(content, "a question's instructions", "questions")
    images: list[str] = []
    text = "\n".join(_content_text(content, images, "a question's instructions"))
    if images:
        raise ConfigError(
            "a question's instructions hold an image: MAI reads the images of the state",
            parameter="questions",
            fix="put the images in the state; keep the instructions text",
        )
    return text


def _describe(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _answering_record(result: MAIResult) -> dict[str, Any] | None:
    node, role = _ANSWERING.get(result.route, ("verify", "large"))
    found = [m for m in result.metrics if m["node"] == node and m["role"] == role]
    return dict(found[-1]) if found else None


def _probabilities(
    record: dict[str, Any] | None, answers: Sequence[str], chosen: str
) -> tuple[dict[str, float], str]:
    """The answering call's distribution over ``answers``, and where it came from."""
    dist = (record or {}).get("distribution")
    if isinstance(dist, Mapping) and set(dist) == set(answers):
        return {a: float(dist[a]) for a in answers}, "one_step"
    prob = (record or {}).get("answer_prob")
    p = float(prob) if isinstance(prob, int | float) and math.isfinite(prob) else 1.0
    why = (record or {}).get("distribution_fallback") or "the call returned no distribution"
    return around(answers, chosen, p), f"answer probability ({why})"


class MAIDecisionModel(BaseDecisionModel):
    """Answers LangChain ``Choice`` and ``Noul`` questions with MAI (a small and a large VLM).

    Example:
        >>> from langchain_core.decisions import Choice
        >>> from mai_graph import ScriptedBackend
        >>> small = ScriptedBackend({"short": "B"}, name="s", probs={"short": 0.8})
        >>> large = ScriptedBackend({"short": "B"}, name="l", probs={"short": 0.9})
        >>> decide = MAIDecisionModel(small=small, large=large)
        >>> colour = Choice(instructions="Its colour?", criteria={"blue": None, "red": None})
        >>> out = decide.invoke({"state": "A red square.", "questions": {"colour": colour}})
        >>> out.choices["colour"].choice, round(out.choices["colour"].confidence, 2)
        ('red', 0.9)
    """

    model: str = ""
    """The name reported to LangSmith (default: the small and large backends' names)."""
    small: Any
    """The small model's backend, or several drafter backends."""
    large: Any
    """The large model's backend, or a chain of larger backends, smallest first."""
    context: dict[str, Any] | None = None
    """MAIContext fields for every question's run."""
    image_policy: ImagePolicy | None = None
    """Which images a state may carry (default: :meth:`ImagePolicy.from_env`: data URLs and
    base64, files only under ``MAI_GRAPH_IMAGE_ROOTS``, URLs only with
    ``MAI_GRAPH_IMAGE_URLS=1``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    _mai: MAI | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        """Check the backends first (pydantic would wrap the error in its own).

        Raises:
            ConfigError: ``small`` or ``large`` is not a backend (or a list of them).
        """
        small: Any = data.get("small")  # None: refused, naming the field
        large: Any = data.get("large")
        Lineup.of(small, large)
        super().__init__(**data)

    def model_post_init(self, context: Any) -> None:
        """Name the model after its backends when no name is given."""
        if not self.model:
            self.model = f"{lineup_names(self.small)}+{lineup_names(self.large)}"

    @property
    def _provider(self) -> str:
        return "mai-graph"

    def _owner(self) -> MAI:
        """The lineup's compiled graph, built on the first question and kept with this model."""
        if self._mai is None:
            self._mai = MAI(self.small, self.large)
        return self._mai

    def _classify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        return shared_loop().run(self._aclassify(state, questions))

    async def _aclassify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        if not questions:
            raise ConfigError(
                "a decision request needs at least one question",
                parameter="questions",
                fix='pass {"questions": {"id": Choice(...) or Noul(...)}}',
            )
        for qid, question in questions.items():
            if not isinstance(question, Choice | Noul):
                raise ConfigError(
                    f"question {qid!r} is a {type(question).__name__}: MAIDecisionModel answers "
                    "Choice and Noul questions",
                    parameter="questions",
                    value=type(question).__name__,
                    fix="ask a Choice (pick a label) or a Noul (yes / no) question",
                )
            if isinstance(question, Choice) and len(question.criteria) > len(LETTERS):
                raise ConfigError(
                    f"question {qid!r} has {len(question.criteria)} labels; at most {len(LETTERS)}",
                    parameter="questions",
                    fix="split the choice into several questions",
                )
        sources: list[str] = []
        _check_shape(state, "the state", "state")
        text = "\n".join(t for t in _content_text(state, sources, "the state") if t.strip())
        policy = self.image_policy or ImagePolicy.from_env()
        images = await asyncio.to_thread(resolve_images, sources, policy) if sources else []
        items = list(questions.items())
        first = await self._answer(text, images, *items[0])
        rest = await asyncio.gather(*(self._answer(text, images, *item) for item in items[1:]))
        answers: dict[str, Any] = {}
        metadata: dict[str, dict[str, Any]] = {}
        runs: list[MAIResult] = []
        for qid, (answer, meta, result) in zip(questions, [first, *rest]):
            answers[qid], metadata[qid] = answer, meta
            runs.append(result)
        metrics = [m for r in runs for m in r.metrics]
        sums = totals(metrics)
        usage: UsageMetadata = {
            "total_tokens": int(sums.get("prompt_tokens", 0) + sums.get("generated_tokens", 0)),
            "input_tokens": int(sums.get("prompt_tokens", 0)),
            "output_tokens": int(sums.get("generated_tokens", 0)),
            "input_token_details": {"cache_read": int(sums.get("cached_tokens", 0))},
            "output_token_details": {"reasoning": reasoning_tokens(metrics)},
        }
        return MAIClassifierResponse(
            model=self.model, answers=answers, usage=usage, metadata=metadata
        )

    async def _answer(
        self, text: str, images: list[Any], qid: str, question: Choice | Noul
    ) -> tuple[Any, dict[str, Any], MAIResult]:
        instructions = _instructions(question.instructions)
        ctx = dict(self.context or {})
        if isinstance(question, Choice):
            labels = list(question.criteria)
            options = {
                LETTERS[i]: label if desc is None else f"{label}: {_describe(desc)}"
                for i, (label, desc) in enumerate(question.criteria.items())
            }
            ask = "\n\n".join(p for p in (text, instructions) if p)
            result = await self._owner().arun(
                ask, images=images or None, options=options,
                context={**ctx, "answer_kind": "choice"},
            )  # fmt: skip
            record = _answering_record(result)
            letters = list(options)
            chosen = result.canonical if result.canonical in options else None
            probs, source = _probabilities(record, letters, chosen or "")
            if chosen is None:  # an unreadable answer: the distribution's argmax, if any
                chosen = max(letters, key=lambda a: probs[a])
            by_label = {labels[letters.index(a)]: p for a, p in probs.items()}
            label = labels[letters.index(chosen)]
            answer: Any = ChoiceAnswer(
                type="choice",
                choice=label,
                probabilities=by_label,
                confidence=min(1.0, max(0.0, by_label[label])),
            )
        else:
            criteria = question.criteria
            meaning = []
            if criteria is not None and criteria.true is not None:
                meaning.append(f"Yes means: {_describe(criteria.true)}")
            if criteria is not None and criteria.false is not None:
                meaning.append(f"No means: {_describe(criteria.false)}")
            ask = "\n\n".join(p for p in (text, instructions, "\n".join(meaning)) if p)
            result = await self._owner().arun(
                ask, images=images or None, context={**ctx, "answer_kind": "yes_no"}
            )
            record = _answering_record(result)
            readable = result.canonical in ("yes", "no")
            probs, source = _probabilities(record, ["yes", "no"], result.canonical)
            if not readable and source != "one_step":  # a refusal, no distribution: undecided
                probs = {"yes": 0.5, "no": 0.5}
            answer = NoulAnswer(type="noul", noul=min(1.0, max(0.0, probs["yes"])))
        node, role = _ANSWERING.get(result.route, ("verify", "large"))
        meta = {
            "route": result.route,
            "answered_by": role,
            "call": node,
            "distribution": source,
            "metrics": result.metrics,
        }
        return answer, meta, result
