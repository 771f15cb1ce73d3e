"""The models of a graph: drafters (the first, small stage) and a chain of larger models.

``create_mai_graph(small, large, *larger)`` builds its graph over a :class:`Lineup`:

- ``small`` is one backend, or several **drafters** (each drafts ``drafts`` times per run);
- ``large`` and ``larger`` form the **chain**, smallest first. Stage ``s`` pairs the chain's
  model ``s - 1`` (the drafters, for stage 1) as *small* with model ``s`` as *large*; a stage
  whose large model answers after a transfer hands that answer on to the next stage.

The two-model graph (one drafter, a chain of one) is the special case, run by the same code
as always. Per run, the drafts come from the lineup and the context (:meth:`Lineup.drafts`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from mai_graph.answers import canonical_match
from mai_graph.backends.base import GenerationRequest, VLMBackend, check_backend
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.flow import Layout, Member
from mai_graph.instrumented import instrumented

__all__ = ["Drafter", "Lineup", "rank_drafts"]


@dataclass(frozen=True, slots=True)
class Drafter:
    """One draft of a run: which backend writes it and how it samples."""

    index: int
    """Its position in the run's drafts (``drafter`` in state, metrics and events)."""
    backend: VLMBackend
    sampled: bool
    """True when the run takes several drafts per small model (``drafts > 1``): the draft's
    short answer and reasoning are sampled at ``draft_temperature``."""

    def request_for(self, request: GenerationRequest, ctx: MAIContext) -> GenerationRequest:
        """``request`` as this draft makes it.

        Sampled drafts answer and reason at ``draft_temperature``, each with its own seed (the
        run's ``seed`` plus the draft's index) when a seed is set.
        """
        if not self.sampled or request.purpose not in ("short", "cot"):
            return request
        seed = None if ctx.seed is None else ctx.seed + self.index
        return dataclasses.replace(request, temperature=ctx.draft_temperature, seed=seed)


def _members(models: object, role: str, what: str) -> TypeGuard[Sequence[VLMBackend]]:
    """True when ``models`` is a list of backends (not one backend); empty lists are refused."""
    if not isinstance(models, Sequence) or isinstance(models, str | bytes):
        return False
    if not models:
        raise ConfigError(
            f"{role} must be a backend or {what}",
            parameter=role,
            value=models,
            fix=f"pass one {role} backend, or a list of them",
        )
    return True


@dataclass(frozen=True)
class Lineup:
    """The drafters and the chain of a graph, validated once when the graph is built."""

    drafters: tuple[VLMBackend, ...]
    """The first stage's small models (one for the two-model graph)."""
    chain: tuple[VLMBackend, ...]
    """The larger models, smallest first; ``chain[0]`` is the first stage's large model."""

    @classmethod
    def of(
        cls,
        small: VLMBackend | Sequence[VLMBackend],
        large: VLMBackend | Sequence[VLMBackend],
        *larger: VLMBackend,
    ) -> Lineup:
        """The lineup of ``create_mai_graph(small, large, *larger)``.

        ``large`` may itself be the chain (a list, smallest first), as ``run(large=[...])``
        takes it; ``larger`` then adds to its end.

        Raises:
            ConfigError: A member is not a backend, or ``small`` or ``large`` is an empty
                sequence.
        """
        if _members(large, "large", "a non-empty sequence of backends (the chain, smallest first)"):
            return cls.of(small, large[0], *large[1:], *larger)
        if _members(small, "small", "a non-empty sequence of drafter backends"):
            drafters = tuple(check_backend(b, f"small[{i}]") for i, b in enumerate(small))
            if len(drafters) == 1:
                drafters = (check_backend(drafters[0], "small"),)
        else:
            drafters = (check_backend(small, "small"),)
        chain = (check_backend(large, "large"),) + tuple(
            check_backend(b, f"larger[{i}]") for i, b in enumerate(larger)
        )
        return cls(drafters, chain)

    @property
    def stages(self) -> int:
        """How many stages the chain has (1 for the two-model graph)."""
        return len(self.chain)

    @property
    def classic(self) -> bool:
        """One drafter and one large model: the paper's two-model graph."""
        return len(self.drafters) == 1 and len(self.chain) == 1

    @property
    def small(self) -> VLMBackend:
        """The first drafter (the ``small`` baselines' model)."""
        return self.drafters[0]

    @property
    def large(self) -> VLMBackend:
        """The last model of the chain (the ``large`` baselines' model)."""
        return self.chain[-1]

    def instrumented(self) -> Lineup:
        """This lineup with every backend reporting its calls (spans, chat-model runs).

        :func:`~mai_graph.graph.create_mai_graph` builds its nodes over it
        (:class:`~mai_graph.instrumented.InstrumentedBackend`).
        """
        return Lineup(
            tuple(instrumented(b) for b in self.drafters),
            tuple(instrumented(b) for b in self.chain),
        )

    @property
    def layout(self) -> Layout:
        """How many drafters and chain models: what :mod:`mai_graph.flow` decides over."""
        return Layout(len(self.drafters), len(self.chain))

    def backend(self, member: Member) -> VLMBackend:
        """The backend at a :class:`~mai_graph.flow.Member`'s place."""
        return (self.drafters if member.side == "drafter" else self.chain)[member.index]

    def backends(self, members: Sequence[Member]) -> list[VLMBackend]:
        """The backends at ``members``' places, in order."""
        return [self.backend(m) for m in members]

    def pair(self, stage: int) -> tuple[VLMBackend, VLMBackend]:
        """The (small, large) backends of a stage (1-based; stage 1's small: the first drafter)."""
        if stage == 1:
            return self.drafters[0], self.chain[0]
        return self.chain[stage - 2], self.chain[stage - 1]

    def baseline_pair(self) -> tuple[VLMBackend, VLMBackend]:
        """The (small, large) backends the baseline policies compare: smallest and largest."""
        return self.drafters[0], self.chain[-1]

    def draft_count(self, ctx: MAIContext) -> int:
        """How many drafts a run takes: drafters times ``drafts``."""
        return len(self.drafters) * ctx.drafts

    def drafts(self, ctx: MAIContext) -> list[Drafter]:
        """The run's drafts: each drafter ``ctx.drafts`` times, in order."""
        sampled = ctx.drafts > 1
        return [
            Drafter(i * ctx.drafts + j, backend, sampled)
            for i, backend in enumerate(self.drafters)
            for j in range(ctx.drafts)
        ]

    def names(self) -> list[str]:
        """Backend names, drafters first, then the chain."""
        return [b.name for b in self.drafters + self.chain]


def rank_drafts(drafts: Sequence[Any], ctx: MAIContext) -> list[int]:
    """Positions of ``drafts`` (mappings with ``s2_canonical`` and ``s2_prob``), best first.

    ``confidence``: by each draft's probability for its S2 answer. ``agreement``: by how many
    other drafts' S2 answers agree with it, then by confidence. Ties keep draft order; a draft
    without a probability ranks below one with any.

    >>> drafts = [{"s2_canonical": "A", "s2_prob": 0.9}, {"s2_canonical": "B", "s2_prob": 0.6},
    ...           {"s2_canonical": "B", "s2_prob": 0.5}]
    >>> rank_drafts(drafts, MAIContext()), rank_drafts(drafts, MAIContext(draft_rank="agreement"))
    ([0, 1, 2], [1, 2, 0])
    """

    def confidence(i: int) -> float:
        prob = drafts[i].get("s2_prob")
        return -1.0 if prob is None else float(prob)

    def support(i: int) -> int:
        mine = drafts[i].get("s2_canonical") or ""
        return sum(
            1
            for j, other in enumerate(drafts)
            if j != i
            and canonical_match(mine, other.get("s2_canonical") or "", rel_tol=ctx.rel_tol)
        )

    order = range(len(drafts))
    if ctx.draft_rank == "agreement":
        return sorted(order, key=lambda i: (-support(i), -confidence(i), i))
    return sorted(order, key=lambda i: (-confidence(i), i))
