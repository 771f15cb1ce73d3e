"""The outcome of a recorded run: as it happened, or replayed offline under other gate settings.

A run's *latency* is its critical path: the two verification calls run concurrently (the
slower counts), everything after them runs in sequence (reasoning, S2, sparsification scoring,
the transfer answer). Runs recorded with every branch (``branches``) are replayed with the
graph's own gate rules (:mod:`mai_graph.gate`), so a replayed route, answer and latency are
those a live run with the same settings would have had.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mai_graph import flow
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.eval.records import CallRecord, SampleRun
from mai_graph.gate import after_disagreement, agreement_exits, pooled_probability

__all__ = [
    "Branches",
    "Outcome",
    "outcome",
    "path_latency",
    "ratio_key",
    "recorded_keep_ratios",
    "replay",
]


@dataclass(frozen=True)
class Outcome:
    """What one run produced and what it cost."""

    sample: str
    policy: str
    route: str
    answer: str
    """The final answer text."""
    canonical: str
    latency_s: float
    """Critical-path model time (see the module docstring)."""
    wall_s: float | None
    """Measured wall time of the graph run (None for replayed runs)."""
    generated: dict[str, int] = field(default_factory=dict)
    """Generated tokens per role (``small`` / ``large``) on the run's path."""
    prompt: dict[str, int] = field(default_factory=dict)
    """Prompt tokens per role on the run's path."""
    large_beyond_short: bool = False
    """The large model did more than its short answer (reasoned, or read the transfer)."""
    calls: int = 0
    path: tuple[CallRecord, ...] = ()
    """The calls on the run's path, in order (what a latency model predicts from)."""


def ratio_key(ratio: float | None) -> float | None:
    """Keep ratios compared at 6 decimals.

    >>> ratio_key(0.2000000001)
    0.2
    """
    return None if ratio is None else round(float(ratio), 6)


def path_latency(calls: Iterable[CallRecord]) -> float:
    """Critical-path seconds of calls on one run's path (verification calls overlap).

    >>> from mai_graph.eval.records import CallRecord
    >>> def c(node, s):
    ...     return CallRecord(sample="x", policy="mai", node=node, role="small", model="m",
    ...                       prompt_tokens=1, generated_tokens=1, latency_s=s)
    >>> path_latency([c("verify", 0.1), c("verify", 0.3), c("reason", 1.0)])
    1.3
    """
    verify = 0.0
    rest = 0.0
    for call in calls:
        if call.node == "verify":
            verify = max(verify, call.latency_s)
        else:
            rest += call.latency_s
            if call.sparsify is not None:
                rest += float(call.sparsify.get("scoring_s") or 0.0)
    return verify + rest


def _outcome(
    run: SampleRun, path: list[CallRecord], route: str, answer: str, canonical: str, wall: Any
) -> Outcome:
    generated: dict[str, int] = {"small": 0, "large": 0}
    prompt: dict[str, int] = {"small": 0, "large": 0}
    for call in path:
        generated[call.role] = generated.get(call.role, 0) + call.generated_tokens
        prompt[call.role] = prompt.get(call.role, 0) + call.prompt_tokens
    return Outcome(
        sample=run.record.sample,
        policy=run.record.policy,
        route=route,
        answer=answer,
        canonical=canonical,
        latency_s=path_latency(path),
        wall_s=wall,
        generated=generated,
        prompt=prompt,
        large_beyond_short=any(c.role == "large" and c.node != "verify" for c in path),
        calls=len(path),
        path=tuple(path),
    )


def recorded_keep_ratios(run: SampleRun) -> list[float]:
    """Keep ratios with a recorded transfer answer in this run."""
    return sorted(
        {
            k
            for c in run.calls
            if c.node == "answer"
            and c.variant != "masked"
            and (k := ratio_key(c.keep_ratio)) is not None
        }
    )


@dataclass(frozen=True)
class Branches:
    """The calls of a run recorded with every branch, ready to replay under any gate."""

    run: SampleRun
    small: CallRecord
    """The small model's short answer."""
    large: CallRecord
    """The large model's short answer."""
    reason: CallRecord
    extract: CallRecord
    answers: dict[float | None, CallRecord]
    """The transfer answer at each recorded keep ratio."""
    masked: dict[float | None, CallRecord] = field(default_factory=dict)
    """The transfer answer without the stated final answer, at each recorded keep ratio."""

    @classmethod
    def of(cls, run: SampleRun) -> Branches:
        """Index a run's calls.

        Raises:
            ConfigError: The run was not recorded with every branch, or lacks a call.
        """
        if not run.record.branches:
            raise ConfigError(
                f"run {run.record.policy}/{run.record.sample} was not recorded with every branch",
                parameter="records",
                fix="evaluate with --branches (gate never, no S2 exit) to replay other settings",
            )
        beyond = sorted(
            {f"drafter {c.drafter}" for c in run.calls if c.drafter is not None}
            | {f"stage {c.stage}" for c in run.calls if c.stage not in (None, 1)}
        )
        if beyond:
            raise ConfigError(
                f"run {run.record.policy}/{run.record.sample} has calls of {', '.join(beyond)}; "
                "replay mirrors the two-model graph with one draft",
                parameter="records",
                fix="measure drafters and chains live (without --branches)",
            )
        by_node: dict[tuple[str, str], CallRecord] = {}
        answers: dict[float | None, CallRecord] = {}
        masked: dict[float | None, CallRecord] = {}
        for call in run.calls:
            if call.node == "answer":
                table = masked if call.variant == "masked" else answers
                table[ratio_key(call.keep_ratio)] = call
            else:
                by_node.setdefault((call.node, call.role), call)
        try:
            return cls(
                run,
                by_node["verify", "small"],
                by_node["verify", "large"],
                by_node["reason", "small"],
                by_node["extract", "small"],
                answers,
                masked,
            )
        except KeyError as exc:
            raise ConfigError(
                f"run {run.record.sample} lacks its {exc.args[0]} call", parameter="records"
            ) from None

    def decide(
        self, ctx: MAIContext, exits: Callable[..., bool] = agreement_exits
    ) -> tuple[str, list[CallRecord], CallRecord]:
        """The route a live run under ``ctx`` takes, its calls, and the call that answers.

        The gate rules are the graph's own (:func:`~mai_graph.gate.agreement_exits`,
        :func:`~mai_graph.gate.after_disagreement`); ``exits`` may be a memoized
        ``agreement_exits``.
        """
        vs, vl, ex = self.small, self.large, self.extract
        cl = vl.canonical or ""
        agree = exits(vs.canonical or "", cl, vs.answer_prob, vl.answer_prob, ctx)
        large_sure = not agree and after_disagreement(vl.answer_prob, ctx, self._pooled) == "large"
        route = flow.after_verify(agree, large_sure) or flow.after_extract(
            "mai",
            ctx.s2_exit,
            ctx.s2_exit and exits(ex.canonical or "", cl, ex.answer_prob, vl.answer_prob, ctx),
        )
        if route is not None:
            return route, self._path(route), vl if route in ("agree", "large_confident") else ex
        table = self.masked if ctx.transfer_mask_answer else self.answers
        final = table.get(ratio_key(ctx.keep_ratio))
        if final is None:
            which = "masked transfer answer" if ctx.transfer_mask_answer else "transfer answer"
            raise ConfigError(
                f"keep_ratio {ctx.keep_ratio} has no recorded {which} for sample "
                f"{self.run.record.sample} (recorded: {recorded_keep_ratios(self.run)})",
                parameter="transfer_mask_answer" if ctx.transfer_mask_answer else "keep_ratio",
                value=ctx.keep_ratio,
                fix="evaluate with --transfer-variants full,masked"
                if ctx.transfer_mask_answer
                else "replay a recorded keep ratio, or evaluate with --keep-ratios",
            )
        return "transfer", self._path("transfer", final), final

    @functools.cached_property
    def _pooled(self) -> float | None:
        """The pooled probability of the large short answer (one per run, whatever the gate)."""
        return pooled_probability(
            self.small.distribution, self.large.distribution, self.large.canonical or ""
        )

    def _path(self, route: str, answer: CallRecord | None = None) -> list[CallRecord]:
        """The recorded calls of ``route`` in order (:func:`mai_graph.flow.calls`).

        The transfer's ``answer`` is among them; memoized, since the settings replayed over a
        run share it.
        """
        key = (route, None if answer is None else id(answer))
        path = self._paths.get(key)
        if path is None:
            recorded = {
                ("verify", "small"): self.small,
                ("verify", "large"): self.large,
                ("reason", "small"): self.reason,
                ("extract", "small"): self.extract,
            }
            if answer is not None:
                recorded["answer", "large"] = answer
            path = self._paths[key] = [recorded[c] for c in flow.calls(route)]
        return list(path)

    @functools.cached_property
    def _paths(self) -> dict[tuple[str, int | None], list[CallRecord]]:
        return {}


def replay(run: SampleRun, ctx: MAIContext) -> Outcome:
    """The outcome a live MAI run under ``ctx`` would have had, from a run with every branch.

    Raises:
        ConfigError: The run was not recorded with every branch, or ``ctx.keep_ratio`` has no
            recorded transfer answer.
    """
    route, path, final = Branches.of(run).decide(ctx)
    return _outcome(run, path, route, final.text or "", final.canonical or "", None)


def outcome(run: SampleRun, ctx: MAIContext | Mapping[str, Any] | None = None) -> Outcome:
    """A run's outcome: replayed under ``ctx`` if it has every branch, else as it happened."""
    if run.record.branches:
        return replay(run, MAIContext.coerce(ctx))
    return _outcome(
        run, run.calls, run.record.route, run.record.answer, run.record.canonical, run.record.wall_s
    )
