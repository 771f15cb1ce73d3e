"""The sparsification ablation: what the large model reads, and what that does to its answer.

MAI's transfer sends the large model a sparsified reasoning: ``keep_ratio`` of the small
model's tokens, chosen by a strategy (``surprisal``, ``attention``, ``relevance``; ``none``
sends everything). The paper keeps the top 20% by surprisal; this measures that choice instead
of assuming it. Each sample runs once through MAI with every branch (the small model reasons
once, its S2 answer is taken); the transfer is then forked from the checkpoint before the
sparsify node for every strategy and keep ratio, so all of them read the same reasoning.

Per strategy and keep ratio: transfer accuracy (all samples, and the samples whose two short
answers disagree, the ones MAI escalates), the reasoning tokens the large model prefilled,
its whole transfer prompt, and the score mass the selection dropped. ``none`` keeps everything
whatever the ratio: it is measured once. A strategy the graph has no scorer for (``attention``
needs a backend that exposes attention weights, e.g. transformers) is reported unavailable,
with the reason.

``mai-graph eval --sparsify-ablation`` runs it and writes ``OUT/ablation.json`` and
``OUT/ablation.md``.
"""

from __future__ import annotations

import asyncio
import statistics
import uuid
from collections.abc import Sequence
from typing import Any, get_type_hints

from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.eval.report import percent

__all__ = ["ABLATION_RATIOS", "ABLATION_STRATEGIES", "arun_ablation", "format_ablation"]

ABLATION_STRATEGIES = ("none", "surprisal", "attention", "relevance")
"""The strategies compared (``none``: the whole reasoning)."""
ABLATION_RATIOS = (0.1, 0.2, 0.4, 1.0)
"""The keep ratios compared."""


def _mean(xs: Sequence[float]) -> float | None:
    return round(statistics.fmean(xs), 4) if xs else None


async def arun_ablation(
    samples: Sequence[Any],
    small: Any,
    large: Any,
    *,
    context: MAIContext | None = None,
    strategies: Sequence[str] = ABLATION_STRATEGIES,
    ratios: Sequence[float] = ABLATION_RATIOS,
    concurrency: int = 4,
) -> dict[str, Any]:
    """Run the ablation over ``samples`` (started backends) and return its table as a dict.

    Returns ``{"n", "disagreements", "large_short", "small_s2", "strategies": {name:
    {"available": bool, "why"?: str, "ratios": {ratio: cell}}}}``; a cell holds ``accuracy``,
    ``accuracy_disagreements``, ``reasoning_tokens_in``, ``reasoning_tokens_read``,
    ``prompt_tokens`` (the large model's transfer prompt) and ``dropped_mass`` (means).
    """
    from langgraph.checkpoint.memory import InMemorySaver

    from mai_graph.eval.runner import BRANCH_SETTINGS
    from mai_graph.graph import create_mai_graph
    from mai_graph.state import MAIState

    unknown = [s for s in strategies if s not in ABLATION_STRATEGIES]
    if unknown or not strategies:
        raise ConfigError(
            f"unknown sparsify strategies {unknown}", parameter="strategies",
            value=list(strategies), fix=f"choose among {list(ABLATION_STRATEGIES)}",
        )  # fmt: skip
    if not ratios or any(not 0 < r <= 1 for r in ratios):
        raise ConfigError(
            f"keep ratios must be in (0, 1], got {list(ratios)}", parameter="ratios",
            value=list(ratios),
        )  # fmt: skip
    base = context or MAIContext()
    saver = InMemorySaver()
    graph: Any = create_mai_graph(small, large).compile(name="mai-ablation", checkpointer=saver)
    keys = [k for k in get_type_hints(MAIState) if k in graph.channels]
    cells = [("none", 1.0)] if "none" in strategies else []
    cells += [(s, float(r)) for s in strategies if s != "none" for r in ratios]
    unavailable: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(sample: Any) -> None:
        async with gate:
            ctx = base.replace(policy="mai", answer_kind=sample.kind, **BRANCH_SETTINGS)
            thread = {"configurable": {"thread_id": f"ablation-{uuid.uuid4().hex}"}}
            out = await graph.ainvoke(sample.graph_input(), thread, context=ctx, output_keys=keys)
            before = None
            async for snapshot in graph.aget_state_history(thread):
                if snapshot.next == ("sparsify",):
                    before = snapshot.config
                    break
            row: dict[str, Any] = {
                "apart": (out.get("small_canonical") or "") != (out.get("large_canonical") or ""),
                "large": sample.verdict(out.get("large_answer") or "").credit,
                "s2": sample.verdict(out.get("s2_answer") or "").credit,
                "cells": {},
            }
            for strategy, ratio in cells:
                if before is None or strategy in unavailable:
                    continue
                fork_ctx = ctx.replace(sparsify=strategy, keep_ratio=ratio)
                try:
                    fork = await graph.ainvoke(None, before, context=fork_ctx, output_keys=keys)
                except ConfigError as err:
                    unavailable.setdefault(strategy, err.args[0] if err.args else str(err))
                    continue
                sp = fork.get("sparsification") or {}
                answer_calls = [m for m in fork.get("metrics") or [] if m["node"] == "answer"]
                row["cells"][(strategy, ratio)] = {
                    "credit": sample.verdict(fork.get("answer") or "").credit,
                    "tokens_in": sp.get("tokens_in", 0),
                    "tokens_out": sp.get("tokens_out", 0),
                    "dropped": sp.get("dropped_mass", 0.0),
                    "prompt": answer_calls[-1]["prompt_tokens"] if answer_calls else None,
                }
            await saver.adelete_thread(thread["configurable"]["thread_id"])
            rows.append(row)

    await asyncio.gather(*(one(s) for s in samples))
    apart = [r for r in rows if r["apart"]]
    out: dict[str, Any] = {
        "n": len(rows),
        "disagreements": len(apart),
        "large_short": {"accuracy": _mean([r["large"] for r in rows]),
                        "accuracy_disagreements": _mean([r["large"] for r in apart])},
        "small_s2": {"accuracy": _mean([r["s2"] for r in rows]),
                     "accuracy_disagreements": _mean([r["s2"] for r in apart])},
        "context": {"whole_words": base.whole_words, "force_keep": base.force_keep,
                    "keep_mass": base.keep_mass},
        "strategies": {},
    }  # fmt: skip
    for strategy in strategies:
        if strategy in unavailable:
            out["strategies"][strategy] = {"available": False, "why": unavailable[strategy]}
            continue
        table: dict[str, Any] = {}
        for s, ratio in cells:
            if s != strategy:
                continue
            got = [r["cells"][(s, ratio)] for r in rows if (s, ratio) in r["cells"]]
            got_apart = [r["cells"][(s, ratio)] for r in apart if (s, ratio) in r["cells"]]
            prompts = [c["prompt"] for c in got if c["prompt"] is not None]
            table[f"{ratio:g}"] = {
                "n": len(got),
                "accuracy": _mean([c["credit"] for c in got]),
                "accuracy_disagreements": _mean([c["credit"] for c in got_apart]),
                "reasoning_tokens_in": _mean([c["tokens_in"] for c in got]),
                "reasoning_tokens_read": _mean([c["tokens_out"] for c in got]),
                "prompt_tokens": _mean(prompts),
                "dropped_mass": _mean([c["dropped"] for c in got]),
            }
        out["strategies"][strategy] = {"available": True, "ratios": table}
    return out


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def format_ablation(result: dict[str, Any]) -> str:
    """The ablation as a Markdown table (what ``ablation.md`` holds).

    >>> table = format_ablation({"n": 2, "disagreements": 1,
    ...     "large_short": {"accuracy": 0.5, "accuracy_disagreements": 0.0},
    ...     "small_s2": {"accuracy": 0.5, "accuracy_disagreements": 1.0},
    ...     "strategies": {"none": {"available": True, "ratios": {"1": {"n": 2,
    ...     "accuracy": 1.0, "accuracy_disagreements": 1.0, "reasoning_tokens_in": 40.0,
    ...     "reasoning_tokens_read": 40.0, "prompt_tokens": 90.0, "dropped_mass": 0.0}}},
    ...     "attention": {"available": False, "why": "no scorer"}}})
    >>> table.splitlines()[0].split("; ")[0]
    '2 samples, 1 whose short answers disagree'
    >>> for line in table.splitlines()[-2:]:
    ...     print(line)
    | none | 1 | 100.0% | 100.0% | 40.0 of 40.0 | 90.0 | 0.000 |
    | attention | - | unavailable: no scorer | | | | |
    """
    ls, s2 = result["large_short"], result["small_s2"]
    lines = [
        f"{result['n']} samples, {result['disagreements']} whose short answers disagree; "
        f"large short answer {percent(ls['accuracy'])} ({percent(ls['accuracy_disagreements'])} on "
        f"those), small S2 {percent(s2['accuracy'])} ({percent(s2['accuracy_disagreements'])})",
        "",
        "| strategy | keep ratio | transfer accuracy | on disagreements | reasoning tokens read "
        "| transfer prompt tokens | dropped mass |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, block in result["strategies"].items():
        if not block["available"]:
            lines.append(f"| {name} | - | unavailable: {block['why']} | | | | |")
            continue
        for ratio, c in block["ratios"].items():
            lines.append(
                f"| {name} | {ratio} | {percent(c['accuracy'])} | "
                f"{percent(c['accuracy_disagreements'])} | {_num(c['reasoning_tokens_read'])} of "
                f"{_num(c['reasoning_tokens_in'])} | {_num(c['prompt_tokens'])} | "
                f"{_num(c['dropped_mass'], 3)} |"
            )
    return "\n".join(lines)
