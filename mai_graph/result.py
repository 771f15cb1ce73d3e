"""The outcome of one run (:class:`MAIResult`), its totals and its human-readable form."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from mai_graph.state import Draft, NodeMetrics, Sparsification

__all__ = ["MAIResult", "format_calls", "totals"]


def totals(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Sums over metrics records: calls, prompt / cached / generated tokens, model seconds.

    >>> totals([{"prompt_tokens": 10, "cached_tokens": None, "generated_tokens": 2,
    ...          "latency_s": 0.5}])["prompt_tokens"]
    10
    """
    return {
        "calls": len(records),
        "prompt_tokens": sum(r["prompt_tokens"] for r in records),
        "cached_tokens": sum(r["cached_tokens"] or 0 for r in records),
        "generated_tokens": sum(r["generated_tokens"] for r in records),
        "model_latency_s": sum(r["latency_s"] for r in records),
    }


def reasoning_tokens(records: Sequence[Mapping[str, Any]]) -> int:
    """Tokens the models generated as reasoning (the ``reason`` node's calls), of all generated.

    >>> reasoning_tokens([{"node": "reason", "generated_tokens": 40},
    ...                   {"node": "answer", "generated_tokens": 2}])
    40
    """
    return sum(int(r["generated_tokens"]) for r in records if r.get("node") == "reason")


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def _prob(p: float | None) -> str:
    return "-" if p is None else f"{p:.2f}"


def _who(m: Mapping[str, Any]) -> str:
    """The role of a call, with its chain stage and draft when it has them.

    >>> _who({"role": "small", "stage": 2}), _who({"role": "small", "drafter": 1})
    ('small@2', 'small#1')
    """
    who = str(m["role"])
    if m.get("stage") is not None:
        who += f"@{m['stage']}"
    if m.get("drafter") is not None:
        who += f"#{m['drafter']}"
    return who


def format_calls(metrics: Sequence[Mapping[str, Any]]) -> str:
    """A table of per-call metrics (one row per model call).

    The role reads ``small@2`` for a chain's stage 2 and ``small#1`` for draft 1. ``img`` is
    the prompt's image tokens; ``queue``, ``prefill`` and ``decode`` are the engine's own stage
    timings in ms ("-" where the backend gives none).
    """
    width = max([6] + [len(_who(m)) for m in metrics])
    head = (
        f"  {'node':<8} {'role':<{width}} {'prompt':>7} {'img':>5} {'cached':>7} {'gen':>5} "
        f"{'ms':>7} {'ttft':>6} {'queue':>6} {'prefill':>7} {'decode':>7} {'p':>5}"
    )
    rows = [head]
    for m in metrics:
        cached = "-" if m["cached_tokens"] is None else str(m["cached_tokens"])
        image = m.get("image_tokens")
        rows.append(
            f"  {m['node']:<8} {_who(m):<{width}} {m['prompt_tokens']:>7} "
            f"{'-' if image is None else image:>5} {cached:>7} "
            f"{m['generated_tokens']:>5} {_ms(m['latency_s']):>7} {_ms(m['ttft_s']):>6} "
            f"{_ms(m.get('queue_s')):>6} {_ms(m.get('prefill_s')):>7} "
            f"{_ms(m.get('decode_s')):>7} {_prob(m.get('answer_prob')):>5}"
        )
    return "\n".join(rows)


@dataclass(frozen=True)
class MAIResult:
    """The outcome of one MAI run."""

    answer: str
    """The final answer text, as the answering model wrote it."""
    canonical: str
    """Its canonical form (option letter, yes/no, number, normalized text, or ``UNKNOWN``)."""
    route: str
    """How the run ended; see :data:`mai_graph.state.Route`."""
    metrics: list[NodeMetrics]
    """One record per model call, in call order."""
    wall_s: float
    """Wall time of the whole run, orchestration included."""
    small_answer: str | None = None
    large_answer: str | None = None
    s2_answer: str | None = None
    small_prob: float | None = None
    """The small model's probability for its short answer, when its backend gives logprobs."""
    large_prob: float | None = None
    """The large model's probability for its short answer, when its backend gives logprobs."""
    small_distribution: dict[str, float] | None = None
    """Bounded questions: the small model's probability of each allowed answer (verify)."""
    large_distribution: dict[str, float] | None = None
    """Bounded questions: the large model's probability of each allowed answer (verify)."""
    sparsification: Sparsification | None = None
    transfer: str | None = None
    """Transfer runs: the sparsified reasoning the large model read in its prefill."""
    stage: int | None = None
    """Graphs over a chain: the stage that ended the run (1 = the first pair)."""
    drafts: list[Draft] | None = None
    """Runs with several drafts: each draft's answers (and reasoning, when it escalated)."""
    totals: dict[str, float] = field(default_factory=dict)
    """Sums over ``metrics``: calls, prompt / cached / generated tokens, model seconds."""

    @classmethod
    def from_output(cls, out: Mapping[str, Any], wall_s: float) -> MAIResult:
        """The result of a graph's output state."""
        metrics = list(out.get("metrics") or [])
        return cls(
            answer=out["answer"],
            canonical=out["canonical"],
            route=out["route"],
            metrics=metrics,
            wall_s=wall_s,
            small_answer=out.get("small_answer"),
            large_answer=out.get("large_answer"),
            s2_answer=out.get("s2_answer"),
            small_prob=out.get("small_prob"),
            large_prob=out.get("large_prob"),
            small_distribution=out.get("small_distribution"),
            large_distribution=out.get("large_distribution"),
            sparsification=out.get("sparsification"),
            transfer=out.get("transfer") if out.get("route") == "transfer" else None,
            stage=out.get("stage"),
            drafts=out.get("drafts"),
            totals=totals(metrics),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    def format(self) -> str:
        """A human-readable summary: route, answers, sparsification, per-call table, totals."""
        stage = "" if self.stage is None else f" (stage {self.stage})"
        lines = [
            f"route:     {self.route}{stage}",
            f"answer:    {self.answer!r} (canonical: {self.canonical})",
        ]
        for label, value, prob in (
            ("small", self.small_answer, self.small_prob),
            ("large", self.large_answer, self.large_prob),
            ("s2", self.s2_answer, None),
        ):
            if value is not None:
                p = "" if prob is None else f"  (p={prob:.2f})"
                dist = getattr(self, f"{label}_distribution", None)
                if dist:
                    p += "  " + " ".join(f"{a}={q:.2f}" for a, q in dist.items())
                lines.append(f"{label + ':':<10} {value!r}{p}")
        for d in self.drafts or ():
            s2 = f", s2 {d['s2_answer']!r}" if "s2_answer" in d else ""
            rank = f", rank {d['rank']}" if "rank" in d else ""
            lines.append(f"draft {d['drafter']}:   {d['answer']!r}{s2}{rank} ({d['model']})")
        if self.sparsification:
            s = self.sparsification
            lines.append(
                f"sparsify:  {s['strategy']} kept {s['tokens_out']}/{s['tokens_in']} tokens, "
                f"dropped mass {s['dropped_mass']:.2f}"
            )
        if self.transfer is not None:
            shown = self.transfer if len(self.transfer) <= 300 else self.transfer[:297] + "..."
            lines.append(f"reads:     {shown!r}  (what the large model read)")
        lines.append(format_calls(self.metrics))
        t = self.totals
        lines.append(
            f"total:     {self.wall_s * 1000:.0f} ms wall, {t['calls']} calls, "
            f"{t['prompt_tokens']} prompt ({t['cached_tokens']} cached), "
            f"{t['generated_tokens']} generated tokens"
        )
        return "\n".join(lines)
