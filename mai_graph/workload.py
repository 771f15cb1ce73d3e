"""One run's token accounting: the calls of each route with their tokens, and each model's context.

A :class:`Workload` holds the token counts of one MAI question (prompt sizes, reasoning and
answer lengths, the share of the reasoning transferred). From them and the flow
(:data:`mai_graph.flow.ENDINGS`) it gives every route's calls as :class:`CallTokens` records
(:meth:`Workload.calls`) and the longest context each side's model holds in any of them
(:meth:`Workload.context_tokens`). Both consumers read this one accounting:

- the latency model (:mod:`mai_graph.latency`) prices each call of a route (typical lengths,
  measured on a profiled pair);
- the memory plan (:mod:`mai_graph.deploy.plan`) sizes each engine's ``max_model_len`` from
  the context its model needs (the run settings' budgets: :meth:`Workload.from_context`, at
  the model's own image tokens: :meth:`Workload.for_model`).

Pure: no engine, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from mai_graph import flow

__all__ = [
    "S2_TURN_TOKENS",
    "TEMPLATE_TOKENS",
    "CallTokens",
    "Workload",
]

TEMPLATE_TOKENS = 96
"""Chat-template tokens of a prompt beside the question: system prompt, role markers,
instructions (mai-graph's prompts are shorter than this)."""

S2_TURN_TOKENS = 48
"""The S2 extraction turn's own tokens (instruction and markers)."""


@dataclass(frozen=True)
class CallTokens:
    """One model call: who makes it, and how many tokens of what kind."""

    role: flow.Role
    node: str
    """``verify``, ``reason``, ``extract``, ``answer`` (or anything for profiling calls)."""
    uncached: int
    """Prompt tokens the engine had to prefill (prompt tokens minus prefix-cache hits)."""
    cached: int = 0
    """Prompt tokens served from the prefix cache."""
    generated: int = 1
    image: bool = False
    """The call carries an image the engine has not seen yet (processor and encoder run)."""
    constrained: bool = False
    """The output is constrained to a set of choices (structured output set-up)."""

    @property
    def context(self) -> int:
        """Prompt tokens in all."""
        return self.uncached + self.cached

    @property
    def total(self) -> int:
        """Prompt and generated tokens: the context the call holds when it ends."""
        return self.context + self.generated

    def features(self) -> tuple[float, ...]:
        """The latency model's regressors for this call.

        In the order of :data:`mai_graph.latency.model.FEATURES`: the call's modelled seconds
        are their coefficients times these.
        """
        u, c, n = self.uncached, self.cached, max(self.generated, 1)
        steps = n - 1  # the first token comes out of the prefill step
        return (
            1.0,
            float(u),
            u * (c + u / 2) / 1000.0,
            float(self.image),
            float(self.constrained),
            float(steps),
            steps * (self.context + n / 2) / 1000.0,
        )


class Workload(BaseModel):
    """Token counts of one MAI question, and the calls each route makes with them.

    The defaults are a typical short multiple-choice question with one image (what the
    latency model predicts for unless measured); :meth:`from_context` gives the longest run
    the settings allow (what the memory plan sizes engines for).

    Example:
        >>> w = Workload(prompt_tokens=200, cot_tokens=100)
        >>> [(c.node, c.role, c.total) for c in w.calls("transfer")][2:]
        [('reason', 'small', 300), ('extract', 'small', 334), ('answer', 'large', 222)]
        >>> w.context_tokens("small"), w.context_tokens("large")
        (334, 334)
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    prompt_tokens: Annotated[int, Field(ge=1)] = 256
    """The short-answer prompt: system, image tokens, question, instruction."""
    cot_prompt_tokens: Annotated[int | None, Field(ge=1)] = None
    """The reasoning prompt (default: ``prompt_tokens``)."""
    prompt_cached: Annotated[int, Field(ge=0)] = 0
    """Tokens of a new question's first prompt already cached (the shared system prompt)."""
    reason_uncached: Annotated[int, Field(ge=0)] = 32
    """Uncached prompt tokens of the small model's reasoning call after its short answer."""
    s2_uncached: Annotated[int, Field(ge=0)] = 32
    """Uncached prompt tokens of the S2 turn (the reasoning itself is cached)."""
    answer_uncached: Annotated[int, Field(ge=0)] = 48
    """Uncached prompt tokens of the transfer call besides the transferred tokens."""
    short_tokens: Annotated[int, Field(ge=1)] = 2
    """Tokens a short answer generates (an option letter and the end of turn)."""
    s2_tokens: Annotated[int | None, Field(ge=1)] = None
    """Tokens the S2 turn generates (default: ``short_tokens``)."""
    cot_tokens: Annotated[int, Field(ge=1)] = 300
    """N_S: the small model's reasoning length."""
    large_cot_tokens: Annotated[int | None, Field(ge=1)] = None
    """N_L: the large model's reasoning length in ``large_cot`` (default: ``cot_tokens``)."""
    keep_ratio: Annotated[float, Field(gt=0, le=1)] = 0.2
    """Share of the reasoning transferred to the large model."""
    max_transfer_tokens: Annotated[int | None, Field(ge=1)] = None
    """Most reasoning tokens transferred, whatever the ratio (``None``: no cap)."""
    image: bool = True
    """Questions carry an image."""
    constrained: bool = True
    """Short answers are constrained to the options (multiple choice)."""
    images: Annotated[int, Field(ge=0)] = 1
    """Images per question, for :meth:`for_model` (a video counts as its frames' tokens; plan
    for it with ``max_pixels``)."""
    max_pixels: Annotated[int | None, Field(ge=1)] = None
    """Pixel cap per image the plan sizes image tokens at (default: each model's
    ``mm_processor_kwargs`` ``max_pixels``, else its processor's cap)."""
    question_tokens: Annotated[int, Field(ge=0)] = 256
    """The question and its options, for :meth:`for_model`."""

    @classmethod
    def from_context(cls, context: Any = None, **overrides: Any) -> Workload:
        """The longest run under ``context`` (a ``MAIContext``; default settings if None).

        Every generation at its budget, the transfer at ``keep_ratio`` of the CoT budget (all
        of it without sparsification), at most ``max_transfer_tokens``; ``overrides`` that are
        not ``None`` replace fields (``images``, ``max_pixels``, ``question_tokens``).

        >>> w = Workload.from_context()
        >>> w.cot_tokens, w.short_tokens, w.transfer_tokens
        (512, 16, 103)
        """
        from mai_graph.context import MAIContext

        ctx = context if context is not None else MAIContext()
        values: dict[str, Any] = dict(
            cot_tokens=ctx.cot_max_tokens,
            large_cot_tokens=ctx.cot_max_tokens,
            short_tokens=ctx.short_max_tokens,
            s2_tokens=ctx.s2_max_tokens,
            s2_uncached=S2_TURN_TOKENS,
            keep_ratio=1.0 if ctx.sparsify == "none" else ctx.keep_ratio,
            max_transfer_tokens=ctx.max_transfer_tokens,
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def for_model(self, image_tokens: int) -> Workload:
        """This workload on a model whose images take ``image_tokens`` each.

        The prompt is the chat template, :attr:`images` images and the question; nothing of
        it is cached (an engine must hold all of it).

        >>> Workload(images=2, question_tokens=100).for_model(64).prompt_tokens
        324
        """
        prompt = TEMPLATE_TOKENS + self.images * image_tokens + self.question_tokens
        return self.model_copy(
            update={"prompt_tokens": max(prompt, 1), "cot_prompt_tokens": None, "prompt_cached": 0}
        )

    @property
    def transfer_tokens(self) -> int:
        """Reasoning tokens the large model reads.

        ``keep_ratio`` of the small model's reasoning, rounded up and at least one, as the
        selection counts them (:func:`mai_graph.scoring.base.select`), at most
        :attr:`max_transfer_tokens`.
        """
        kept = max(1, math.ceil(self.keep_ratio * self.cot_tokens - 1e-9))
        return min(kept, self.max_transfer_tokens) if self.max_transfer_tokens else kept

    def calls(self, route: str) -> list[CallTokens]:
        """The calls of a route (:func:`mai_graph.flow.calls`), in order, with their tokens.

        The two ``verify`` calls of a MAI route run concurrently.
        """
        flow.check_route(route)
        p = self.prompt_tokens
        pc = self.cot_prompt_tokens or p
        n, img, con = self.short_tokens, self.image, self.constrained
        s2 = self.s2_tokens or n

        def fresh(role: flow.Role, node: str, prompt: int, generated: int, con: bool) -> CallTokens:
            cached = min(self.prompt_cached, prompt - 1)
            return CallTokens(role, node, prompt - cached, cached, generated, img, con)

        def reasoned(role: flow.Role) -> int:
            return (
                self.cot_tokens if role == "small" else (self.large_cot_tokens or self.cot_tokens)
            )

        shapes: list[CallTokens] = []
        for step, role in flow.calls(route):
            if step == "verify":
                shapes.append(fresh(role, "verify", p, n, con))
            elif step == "reason" and not shapes:  # a CoT baseline: the run's first call
                shapes.append(fresh(role, "reason", pc, reasoned(role), False))
            elif step == "reason":  # after the short answer, whose prompt it mostly shares
                uncached = self.reason_uncached
                shapes.append(
                    CallTokens(role, "reason", uncached, max(pc - uncached, 0), reasoned(role))
                )
            elif step == "extract":  # the reasoning itself is cached
                shapes.append(
                    CallTokens(
                        role, "extract", self.s2_uncached, pc + reasoned(role), s2, False, con
                    )
                )
            else:  # the transfer: the reasoning read in prefill, one short answer
                uncached = self.answer_uncached + self.transfer_tokens
                cached = max(p - self.answer_uncached, 0)
                shapes.append(CallTokens(role, "answer", uncached, cached, n, False, con))
        return shapes

    def context_tokens(self, role: flow.Role) -> int:
        """The longest context a ``role`` model holds in any route's call.

        The small side's is its S2 turn after its reasoning; the large side's is the longest
        of the transfer it reads and its own reasoning as the ``large_cot`` baseline (or as a
        chain's middle stage, which reasons for the next).
        """
        return max(c.total for route in flow.ENDINGS for c in self.calls(route) if c.role == role)
