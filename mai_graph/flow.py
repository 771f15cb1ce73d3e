"""The flow of a run, encoded once: who is called, who reasons and reads, and how a run ends.

Everything that asks "which model does what under this policy" or "which calls does this route
make" reads it here: the graph's nodes and routers, the budget check in ``prepare``, the memory
plan's roles, the latency model's calls per route and eval's replay of recorded runs. It is pure
(no backends, no state): models are named by their place in a graph's lineup, a
:class:`Member` of a :class:`Layout` (how many drafters, how long the chain), and the gate's
verdicts come in as booleans (:mod:`mai_graph.gate` computes them).

>>> two = Layout()
>>> entry("mai"), entry("large"), entry("small_cot")
('mai', 'short', 'cot')
>>> reasoners("mai", 1, two), readers("mai", two)
(((Member(side='drafter', index=0),), 'small'), (Member(side='chain', index=0),))
>>> [step for step, _ in calls("transfer")]
['verify', 'verify', 'reason', 'extract', 'answer']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from mai_graph.context import Policy
from mai_graph.errors import ConfigError
from mai_graph.state import Route

__all__ = [
    "ENDINGS",
    "Call",
    "Entry",
    "Layout",
    "Member",
    "Role",
    "Step",
    "after_extract",
    "after_verify",
    "budget_roles",
    "called",
    "calls",
    "check_route",
    "entry",
    "memory_role",
    "nodes",
    "readers",
    "reasoners",
]

Role = Literal["small", "large"]
"""The side of a stage a call is made for (a chain's middle model is ``large`` when it reads
and ``small`` when it reasons for the next stage)."""
Step = Literal["verify", "reason", "extract", "answer", "escalate"]
"""The node a model call is recorded under (``prepare`` and ``sparsify`` call no model; the
``baseline`` node's short answer is recorded as ``verify``, as MAI's are)."""
Entry = Literal["mai", "short", "cot"]
"""Where a policy enters the graph after ``prepare``: ``verify``, ``baseline`` or ``reason``."""
Call = tuple[Step, Role]
"""One model call of a route: its step and its role."""


@dataclass(frozen=True, slots=True)
class Member:
    """A model by its place in a lineup: the ``index``-th drafter, or the chain's model."""

    side: Literal["drafter", "chain"]
    index: int


@dataclass(frozen=True, slots=True)
class Layout:
    """How many drafters a graph has and how long its chain is (two models: ``Layout()``)."""

    drafters: int = 1
    chain: int = 1

    def __post_init__(self) -> None:
        if self.drafters < 1 or self.chain < 1:
            raise ConfigError(
                f"a lineup has at least one drafter and one chain model, got {self}",
                parameter="layout",
            )

    @property
    def stages(self) -> int:
        """Stages of the graph: one per chain model."""
        return self.chain

    @property
    def smallest(self) -> Member:
        """The first drafter: the ``small`` baselines' model."""
        return Member("drafter", 0)

    @property
    def largest(self) -> Member:
        """The chain's last model: the ``large`` baselines' model."""
        return Member("chain", self.chain - 1)

    def members(self) -> tuple[Member, ...]:
        """Every model, drafters first, then the chain."""
        return (
            *(Member("drafter", i) for i in range(self.drafters)),
            *(Member("chain", i) for i in range(self.chain)),
        )


def _check_policy(policy: str) -> None:
    if policy not in get_args(Policy):
        raise ConfigError(
            f"policy must be one of {list(get_args(Policy))}, got {policy!r}",
            parameter="policy",
            value=policy,
        )


def entry(policy: Policy) -> Entry:
    """Where a run under ``policy`` goes after ``prepare`` (the graph's first conditional edge).

    >>> [entry(p) for p in ("mai", "small", "large", "small_cot", "large_cot")]
    ['mai', 'short', 'short', 'cot', 'cot']
    """
    _check_policy(policy)
    if policy == "mai":
        return "mai"
    return "short" if policy in ("small", "large") else "cot"


def reasoners(policy: Policy, stage: int, layout: Layout) -> tuple[tuple[Member, ...], Role]:
    """Who writes a chain of thought at ``stage`` under ``policy``, and in which role.

    MAI's first stage: every drafter (each ``drafts`` times a run); stage ``s`` of a chain:
    the model before the stage's large one. ``small_cot``: the smallest model; ``large_cot``:
    the largest, as ``large``. The short baselines reason nowhere.

    >>> chain = Layout(drafters=2, chain=3)
    >>> reasoners("mai", 1, chain)[0]
    (Member(side='drafter', index=0), Member(side='drafter', index=1))
    >>> reasoners("mai", 3, chain)
    ((Member(side='chain', index=1),), 'small')
    >>> reasoners("large_cot", 1, chain)
    ((Member(side='chain', index=2),), 'large')
    """
    _check_policy(policy)
    if policy == "large_cot":
        return (layout.largest,), "large"
    if policy == "small_cot":
        return (layout.smallest,), "small"
    if policy != "mai":
        return (), "small"
    if stage > 1:
        return (Member("chain", stage - 2),), "small"
    return tuple(Member("drafter", i) for i in range(layout.drafters)), "small"


def readers(policy: Policy, layout: Layout) -> tuple[Member, ...]:
    """Who reads a transfer under ``policy``: MAI's chain (each stage's large model), else no one.

    >>> readers("mai", Layout(chain=2)), readers("large_cot", Layout())
    ((Member(side='chain', index=0), Member(side='chain', index=1)), ())
    """
    _check_policy(policy)
    return tuple(Member("chain", i) for i in range(layout.chain)) if policy == "mai" else ()


def called(policy: Policy, layout: Layout) -> tuple[Member, ...]:
    """Every model a run under ``policy`` may call (MAI: each drafter and the chain).

    >>> called("small", Layout(drafters=2)), called("large_cot", Layout(chain=2))
    ((Member(side='drafter', index=0),), (Member(side='chain', index=1),))
    >>> len(called("mai", Layout(drafters=2, chain=2)))
    4
    """
    _check_policy(policy)
    if policy in ("small", "small_cot"):
        return (layout.smallest,)
    if policy in ("large", "large_cot"):
        return (layout.largest,)
    return layout.members()


def budget_roles(policy: Policy, layout: Layout) -> tuple[tuple[Member, ...], tuple[Member, ...]]:
    """``(reasoners, readers)`` of a whole run, every stage together.

    Reasoners' contexts must hold a chain of thought and its S2 turn; readers', a transfer
    and its answer.

    >>> budget_roles("mai", Layout(chain=2))[0]
    (Member(side='drafter', index=0), Member(side='chain', index=0))
    >>> budget_roles("large", Layout())
    ((), ())
    """
    _check_policy(policy)
    writing: list[Member] = []
    stages = layout.stages if policy == "mai" else 1
    for stage in range(1, stages + 1):
        writing += [m for m in reasoners(policy, stage, layout)[0] if m not in writing]
    return tuple(writing), readers(policy, layout)


def memory_role(member: Member, layout: Layout) -> Literal["reasoner", "reader"]:
    """The larger of the contexts ``member`` needs under MAI: ``reasoner`` or ``reader``.

    A model reasons when it does at some stage (drafters, and every chain model but the last).

    The memory plan sizes each engine for it; a reader's context also holds the ``large_cot``
    baseline's reasoning (:meth:`mai_graph.workload.Workload.context_tokens` of the large side).

    >>> chain = Layout(chain=3)
    >>> [memory_role(m, chain) for m in chain.members()]
    ['reasoner', 'reasoner', 'reasoner', 'reader']
    """
    return "reasoner" if member in budget_roles("mai", layout)[0] else "reader"


def after_verify(agree: bool, large_sure: bool) -> Route | None:
    """How a stage's verification ends, from the gate's two verdicts.

    ``agree`` when the agreement holds, else ``large_confident`` when the large model is sure
    enough on its own, else None (reason on).

    >>> after_verify(True, True), after_verify(False, True), after_verify(False, False)
    ('agree', 'large_confident', None)
    """
    if agree:
        return "agree"
    return "large_confident" if large_sure else None


def after_extract(policy: Policy, s2_exit: bool, agrees: bool) -> Route | None:
    """How the S2 turn ends a run, or None: MAI goes on to the transfer.

    A CoT baseline ends on its own answer (its policy's route); MAI on ``extract_agree`` when
    ``s2_exit`` is on and the S2 answer meets the large short answer under the gate (``agrees``).

    >>> after_extract("large_cot", True, False), after_extract("mai", True, True)
    ('large_cot', 'extract_agree')
    >>> after_extract("mai", False, True) is None
    True
    """
    if policy in ("small_cot", "large_cot"):
        return policy
    return "extract_agree" if s2_exit and agrees else None


_VERIFY: tuple[Call, ...] = (("verify", "small"), ("verify", "large"))

ENDINGS: dict[str, tuple[Call, ...]] = {
    "agree": _VERIFY,
    "large_confident": _VERIFY,
    "extract_agree": (*_VERIFY, ("reason", "small"), ("extract", "small")),
    "transfer": (*_VERIFY, ("reason", "small"), ("extract", "small"), ("answer", "large")),
    "small": (("verify", "small"),),
    "large": (("verify", "large"),),
    "small_cot": (("reason", "small"), ("extract", "small")),
    "large_cot": (("reason", "large"), ("extract", "large")),
}
"""The calls of a two-model run, in order, by the route it ends on, each named by the node its
record carries (a short baseline's one call is a short answer, recorded as ``verify`` by the
``baseline`` node). The calls of ``verify`` run at once (the critical path counts the slower);
every other call waits for the one before. ``human`` (a reviewer's answer) ends after
``verify`` and calls nothing more, so it is not here."""

_PASSED: dict[str, tuple[str, ...]] = {
    "agree": ("verify",),
    "large_confident": ("verify",),
    "extract_agree": ("verify", "reason", "extract"),
    "transfer": ("verify", "reason", "extract", "sparsify", "answer"),
    "small": ("baseline",),
    "large": ("baseline",),
    "small_cot": ("reason", "extract"),
    "large_cot": ("reason", "extract"),
}


def check_route(route: str) -> None:
    """Refuse a route that ends on no model calls of :data:`ENDINGS` (``human``) or none at all.

    >>> check_route("transfer")
    """
    if route not in ENDINGS:
        raise ConfigError(
            f"route must be one of {list(ENDINGS)}, got {route!r}",
            parameter="route",
            value=route,
        )


def calls(route: str) -> tuple[Call, ...]:
    """The model calls a two-model run makes when it ends on ``route``, in order.

    >>> calls("large_cot")
    (('reason', 'large'), ('extract', 'large'))
    """
    check_route(route)
    return ENDINGS[route]


def nodes(route: str) -> tuple[str, ...]:
    """The graph nodes a two-model run passes after ``prepare`` when it ends on ``route``.

    >>> nodes("transfer"), nodes("small")
    (('verify', 'reason', 'extract', 'sparsify', 'answer'), ('baseline',))
    """
    check_route(route)
    return _PASSED[route]
