"""MAI on two real engines, measured: decode speeds, per-route latency, concurrency, caching.

Used by ``benchmarks/engines.py`` (full) and ``mai-graph doctor`` (reduced). Output lengths are
forced (every short answer decodes ``short`` tokens, the reasoning ``cot``), and routes are
forced by replacing the *text* of a generation after the engine produced it
(:class:`~mai_graph.backends.recording.ForcedBackend`): the engines do all the work, so each
route's timing is real. The variants are interleaved (one run of each route per repeat), and
the report gives medians and ratios from one run, as the machine's load moves absolute numbers.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mai_graph.backends.recording import ForcedBackend

__all__ = ["ROUTES", "BenchResult", "format_bench", "measure", "route_once"]

ROUTES: Mapping[str, tuple[dict[str, str], dict[str, str], dict[str, Any], str]] = {
    # route: (small texts, large texts, context settings, the route MAI must take)
    "MV-exit (agree)": ({"short": "A"}, {"short": "A"}, {}, "agree"),
    "S2-exit (extract_agree)": ({"short": "A", "s2": "B"}, {"short": "B"}, {}, "extract_agree"),
    "transfer": ({"short": "A", "s2": "C"}, {"short": "B", "answer": "D"}, {}, "transfer"),
    "MV-exit, speculative CoT": ({"short": "A"}, {"short": "A"}, {"speculative_cot": True},
                                 "agree"),
    "transfer, speculative CoT": ({"short": "A", "s2": "C"}, {"short": "B", "answer": "D"},
                                  {"speculative_cot": True}, "transfer"),
    "large-CoT (baseline)": ({}, {"s2": "D"}, {"policy": "large_cot"}, "large_cot"),
}  # fmt: skip
"""The forced routes."""

_cases = itertools.count()


@dataclass
class BenchResult:
    """What :func:`measure` found (latencies in seconds)."""

    short: int
    cot: int
    repeats: int
    latency: dict[str, float] = field(default_factory=dict)
    """Median wall time per route."""
    routes: dict[str, list[str]] = field(default_factory=dict)
    """The route each run of a forced route took (all must be the forced one)."""
    decode_tok_s: dict[str, float] = field(default_factory=dict)
    """Median reasoning decode speed per model (``small``, ``large``)."""
    concurrency: int = 0
    sequential_s: float = 0.0
    concurrent_s: float = 0.0
    s2_cached_share: float = 0.0
    transfer_cached_share: float = 0.0

    @property
    def routes_ok(self) -> bool:
        """Every run took the route it was forced to."""
        return all(all(r == ROUTES[name][3] for r in taken) for name, taken in self.routes.items())

    def speedup(self, route: str) -> float:
        """How many times faster ``route`` ran than the large model reasoning by itself."""
        return self.latency["large-CoT (baseline)"] / self.latency[route]

    @property
    def concurrency_ratio(self) -> float:
        """Sequential time over concurrent time for :attr:`concurrency` transfer runs."""
        return self.sequential_s / self.concurrent_s if self.concurrent_s else 0.0


async def route_once(
    small: Any, large: Any, image: Path, route: str, *, short: int, cot: int
) -> tuple[Any, ForcedBackend, ForcedBackend]:
    """One forced run on a question no earlier run asked (caches hold only what it shares)."""
    from mai_graph.api import arun
    from mai_graph.context import MAIContext
    from mai_graph.tiny.demo import DEMO_OPTIONS, DEMO_QUESTION

    lengths = {"short": short, "cot": cot, "s2": short, "answer": short}
    question = f"{DEMO_QUESTION} (case {next(_cases)})"
    small_text, large_text, settings, _ = ROUTES[route]
    fs, fl = ForcedBackend(small, small_text, lengths), ForcedBackend(large, large_text, lengths)
    ctx = MAIContext(cot_max_tokens=cot, short_max_tokens=short, s2_max_tokens=short, **settings)
    result = await arun(question, str(image), options=DEMO_OPTIONS, small=fs, large=fl, context=ctx)
    return result, fs, fl


def _shared(tokenizer: Any, a: Any, b: Any) -> int:
    from mai_graph.backends.render import common_prefix, render

    return common_prefix(
        render(tokenizer, a.messages, set()).token_ids,
        render(tokenizer, b.messages, set()).token_ids,
    )


def _decode_speed(gen: Any) -> float:
    return float((gen.generated_tokens - 1) / max(gen.latency_s - (gen.ttft_s or 0.0), 1e-9))


async def measure(
    small: Any,
    large: Any,
    image: Path,
    *,
    repeats: int = 5,
    concurrency: int = 32,
    short: int = 8,
    cot: int = 300,
) -> BenchResult:
    """Measure started engines.

    Each route runs ``repeats`` times (interleaved), then ``concurrency`` transfer runs one
    after the other and all at once.
    """
    from mai_graph.backends.render import render

    out = BenchResult(short=short, cot=cot, repeats=repeats, concurrency=concurrency)
    for route in ROUTES:  # warm-up: first-use costs are not what is measured
        await route_once(small, large, image, route, short=short, cot=cot)
    walls: dict[str, list[float]] = {route: [] for route in ROUTES}
    speeds: dict[str, list[float]] = {"small": [], "large": []}
    s2_share, transfer_share = [], []
    for _ in range(repeats):
        for route in ROUTES:
            result, fs, fl = await route_once(small, large, image, route, short=short, cot=cot)
            walls[route].append(result.wall_s)
            out.routes.setdefault(route, []).append(result.route)
            for role, forced in (("small", fs), ("large", fl)):
                speeds[role] += [_decode_speed(g) for r, g in forced.calls if r.purpose == "cot"]
            if route != "transfer":
                continue
            (cot_req, cot_gen), (s2_req, s2_gen) = [
                c for c in fs.calls if c[0].purpose in ("cot", "s2")
            ]
            image_extra = cot_gen.prompt_tokens - len(
                render(small.tokenizer, cot_req.messages, set()).token_ids
            )
            s2_prefix = _shared(small.tokenizer, cot_req, s2_req) + image_extra + cot - 1
            s2_share.append((s2_gen.cached_tokens or 0) / s2_prefix)
            (short_req, _), (ans_req, ans_gen) = [
                c for c in fl.calls if c[0].purpose in ("short", "answer")
            ]
            prefix = _shared(large.tokenizer, short_req, ans_req) + image_extra
            transfer_share.append((ans_gen.cached_tokens or 0) / prefix)
    out.latency = {route: statistics.median(v) for route, v in walls.items()}
    out.decode_tok_s = {k: statistics.median(v) for k, v in speeds.items() if v}
    out.s2_cached_share = statistics.median(s2_share) if s2_share else 0.0
    out.transfer_cached_share = statistics.median(transfer_share) if transfer_share else 0.0
    if concurrency:
        start = time.perf_counter()
        for _ in range(concurrency):
            await route_once(small, large, image, "transfer", short=short, cot=cot)
        out.sequential_s = time.perf_counter() - start
        start = time.perf_counter()
        runs = await asyncio.gather(
            *(route_once(small, large, image, "transfer", short=short, cot=cot)
              for _ in range(concurrency))
        )  # fmt: skip
        out.concurrent_s = time.perf_counter() - start
        out.routes.setdefault("transfer", []).extend(r.route for r, _, _ in runs)
    return out


def format_bench(result: BenchResult, label: str, *, goals: bool = True) -> str:
    """The measurements as text, with the goals each ratio is held to.

    ``goals``: print the full benchmark's goals (a reduced run's shorter reasoning is not sized
    for them).
    """
    r = result
    lines = [
        f"{label}; short = {r.short} tokens, CoT = {r.cot} tokens; medians of {r.repeats} runs",
        "",
    ]
    if "small" in r.decode_tok_s and "large" in r.decode_tok_s:
        vs, vl = r.decode_tok_s["small"], r.decode_tok_s["large"]
        lines += [
            f"decode speed   small {vs:8.1f} tok/s   large {vl:8.1f} tok/s   ratio {vs / vl:.1f}x",
            "",
        ]
    lines.append(f"{'route':<26} {'latency ms':>11} {'speedup vs large-CoT':>21}")
    for route, wall in r.latency.items():
        lines.append(f"{route:<26} {wall * 1e3:>11.0f} {r.speedup(route):>20.1f}x")
    goal = "met" if r.speedup("MV-exit (agree)") >= 8 else "NOT met"
    lines += [f"goal MV-exit >= 8x faster than large-CoT: {goal}", ""] if goals else [""]
    if r.concurrency:
        n = r.concurrency
        lines.append(
            f"{n} transfer runs   sequential {r.sequential_s:6.1f} s "
            f"({n / r.sequential_s:5.2f} runs/s)   concurrent {r.concurrent_s:6.1f} s "
            f"({n / r.concurrent_s:5.2f} runs/s)   {r.concurrency_ratio:.1f}x"
        )
        if goals:
            lines.append(f"goal concurrent >= 3x sequential: "
                         f"{'met' if r.concurrency_ratio >= 3 else 'NOT met'}")  # fmt: skip
        lines.append("")
    s2, tr = r.s2_cached_share, r.transfer_cached_share
    lines.append(f"cached share of the shared prefix   S2 {s2:6.1%}   transfer {tr:6.1%}")
    if goals:
        lines.append(f"goal cached share >= 90%: {'met' if min(s2, tr) >= 0.9 else 'NOT met'}")
    return "\n".join(lines)
