"""``mai-graph demo`` on the trained pair: real questions, real answers, every route measured.

A few held-out synthetic questions go through MAI as it is (no forced choices: the route is
whatever the two models' answers make it) and through the large model reasoning by itself
(``large_cot``), on two real engines. Each question prints the gold answer, both short answers,
the route, MAI's answer and latency, and ``large_cot``'s; a summary compares accuracy and mean
latency, and one run of each route is shown call by call.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mai_graph.answers import normalize_options
from mai_graph.context import MAIContext
from mai_graph.eval.scorers import score
from mai_graph.result import MAIResult
from mai_graph.state import InputState, OutputState

__all__ = ["DEMO_SEED", "DemoRow", "run_trained_demo"]

DEMO_SEED = 36
"""Seed of the demo's questions, for every pair: the demo asks the first ``questions``
held-out items of this seed (``mai-graph synth-data --task TASK --seed 36`` draws them). A
rule fixed before looking at any pair's answers to them (36 is the issue that asked for it),
so the questions are not chosen for their outcome: the demo shows what happens on them, the
evaluation (the manifest's ``evaluation``) measures accuracy. Earlier demos used seeds picked
for the routes they showed (v1 10, v2 11), and the v2 pick did not survive a change of
backend."""

DEMO_SEEDS = {"v1": DEMO_SEED, "v2": DEMO_SEED, "v3": DEMO_SEED, "v4": DEMO_SEED}
"""Demo seed per task (one rule for all)."""


_KEYS = [*OutputState.__annotations__, "reasoning", "transfer"]
"""What the demo reads of a run's final state: the output and the reasoning it transferred."""


@dataclass(frozen=True)
class DemoRow:
    """One question of the demo and what MAI and ``large_cot`` answered."""

    template: str
    question: str
    options: dict[str, str] | None
    gold: str
    kind: str
    mai: MAIResult
    large_cot: MAIResult
    reasoning: str | None = None
    """The small model's reasoning in the MAI run (when it reasoned)."""
    transfer: str | None = None
    """What the large model read of it (when the run transferred)."""

    def right(self, answer: str | None) -> bool:
        """Whether an answer matches the gold answer (the evaluation's scoring)."""
        return answer is not None and score(answer, self.gold, self.kind, self.options).correct

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "template": self.template,
            "question": self.question,
            "options": self.options,
            "gold": self.gold,
            "right": {
                "small": self.right(self.mai.small_answer),
                "large": self.right(self.mai.large_answer),
                "mai": self.right(self.mai.answer),
                "large_cot": self.right(self.large_cot.answer),
            },
            "mai": self.mai.to_dict(),
            "reasoning": self.reasoning,
            "transfer": self.transfer,
            "large_cot": self.large_cot.to_dict(),
        }


_SUBJECT = {
    "v1": "shapes in a grid, bar charts",
    "v2": "shapes in a grid, bar charts",
    "v3": "coloured arrows in a grid, some to follow",
    "v4": "coloured arrows in a grid, followed from a named cell",
}


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def _short_ms(result: MAIResult, role: str) -> float:
    return 1000 * sum(m["latency_s"] for m in result.metrics if m["node"] == "verify"
                      and m["role"] == role)  # fmt: skip


def _question_text(row: DemoRow) -> str:
    if not row.options:
        return row.question
    return f"{row.question} ({', '.join(f'{k} {v}' for k, v in row.options.items())})"


def format_rows(rows: Sequence[DemoRow]) -> str:
    """The per-question lines and the summary."""
    lines = []
    for i, r in enumerate(rows, 1):
        m, c = r.mai, r.large_cot
        lines.append(f"{i:>2} [{r.template}] {_question_text(r)}   gold: {r.gold}")
        lines.append(
            f"   small {m.small_answer!s:<7}{_mark(r.right(m.small_answer))}  "
            f"large {m.large_answer!s:<7}{_mark(r.right(m.large_answer))}  "
            f"-> {m.route:<14} MAI {m.answer:<7}{_mark(r.right(m.answer))} "
            f"{1000 * m.wall_s:>6.0f} ms   large_cot {c.answer:<7}{_mark(r.right(c.answer))} "
            f"{1000 * c.wall_s:>6.0f} ms"
        )
    n = len(rows)

    def acc(flags: Sequence[bool]) -> str:
        return f"{100 * sum(flags) / n:>5.0f}%"

    routes: dict[str, int] = {}
    for r in rows:
        routes[r.mai.route] = routes.get(r.mai.route, 0) + 1
    mai_ms = sum(r.mai.wall_s for r in rows) * 1000 / n
    cot_ms = sum(r.large_cot.wall_s for r in rows) * 1000 / n
    small_ms = sum(_short_ms(r.mai, "small") for r in rows) / n
    large_ms = sum(_short_ms(r.mai, "large") for r in rows) / n
    lines += [
        "",
        f"summary over {n} questions: accuracy, mean latency",
        f"  small alone (short answer) {acc([r.right(r.mai.small_answer) for r in rows])} "
        f"{small_ms:>7.0f} ms",
        f"  large alone (short answer) {acc([r.right(r.mai.large_answer) for r in rows])} "
        f"{large_ms:>7.0f} ms",
        f"  MAI                        {acc([r.right(r.mai.answer) for r in rows])} "
        f"{mai_ms:>7.0f} ms   routes: "
        + ", ".join(f"{k} {v}" for k, v in sorted(routes.items(), key=lambda kv: -kv[1])),
        f"  large_cot                  {acc([r.right(r.large_cot.answer) for r in rows])} "
        f"{cot_ms:>7.0f} ms   (MAI is {cot_ms / mai_ms:.1f}x faster)",
        "  (small / large alone: their short-answer calls inside the MAI runs; MAI and "
        "large_cot: whole runs)",
    ]
    return "\n".join(lines)


def _evaluation_line(manifest: dict[str, Any]) -> str:
    """The pair's measured accuracy and mean latency per policy (from its manifest).

    >>> print(_evaluation_line({"evaluation": {"n": 300, "engine": "vllm", "policies": {
    ...     k: {"accuracy": a, "mean_latency_ms": ms} for k, a, ms in (("small", 0.5, 60),
    ...     ("large", 0.7, 80), ("mai", 0.8, 150), ("large_cot", 0.81, 600))}}}))
      measured on 300 held-out questions (vllm CPU engines), accuracy at mean latency:
        small 50.0% at 60 ms, large 70.0% at 80 ms, MAI 80.0% at 150 ms, large_cot 81.0% at 600 ms
    """
    ev = manifest.get("evaluation")
    if not ev:
        return "  (no engine evaluation in this pair's manifest: see docs/tiny-pair.md)"
    p = ev["policies"]
    names = {"small": "small", "large": "large", "mai": "MAI", "large_cot": "large_cot"}
    parts = [
        f"{label} {100 * p[k]['accuracy']:.1f}% at {p[k]['mean_latency_ms']:.0f} ms"
        for k, label in names.items()
        if k in p
    ]
    return (
        f"  measured on {ev['n']} held-out questions ({ev['engine']} CPU engines), accuracy at "
        f"mean latency:\n    " + ", ".join(parts)
    )


def run_trained_demo(
    *,
    root: str | None = None,
    backend: str = "vllm",
    questions: int = 10,
    seed: int | None = None,
    as_json: bool = False,
) -> int:
    """Start the trained pair's engines, answer ``questions`` synthetic questions, print them.

    ``root`` is a shipped pair's name (``v1``, ``v2``) or a trained pair's folder (default:
    the default shipped pair); ``seed`` defaults to the pair's task's demo seed.
    """
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.pair import pair_root, read_manifest, trained_backends
    from mai_graph.pair.task import heldout_items

    say = (lambda *_: None) if as_json else print
    folder = pair_root(root)
    small, large = trained_backends(backend, folder)
    manifest = read_manifest(folder)
    task = manifest.get("task", "v1")
    say(
        f"trained pair ({task}): {folder}\n"
        f"  a toy: two tiny Qwen3-VL models trained on this task ({_SUBJECT.get(task, '')}) "
        "in minutes on a CPU;\n"
        f"  held-out short-answer accuracy: small {100 * manifest['small']['accuracy']:.0f}%, "
        f"large {100 * manifest['large']['accuracy']:.0f}% (docs/tiny-pair.md)"
    )
    say(_evaluation_line(manifest))
    demo_seed = DEMO_SEEDS[task] if seed is None else seed
    say(f"  the questions: the first {questions} held-out items of seed {demo_seed} "
        f"(mai-graph synth-data --task {task} --seed {demo_seed})")  # fmt: skip
    items = heldout_items(questions, seed=demo_seed, task=task)

    async def go(folder: Path) -> list[DemoRow]:
        from mai_graph.graph import create_mai_graph

        say(f"starting two {backend} backends, one after the other ...")
        await start_backends(small, large)
        graph = create_mai_graph(small, large).compile(name="mai-demo")
        rows = []
        for i, item in enumerate(items):
            path = folder / f"q{i}.png"
            item.image.save(path)
            row = item.row
            inputs = InputState(question=row["question"], image=str(path),
                                options=normalize_options(row.get("options")))  # fmt: skip
            ctx = MAIContext(answer_kind=row["kind"])
            outs = []
            for context in (ctx, ctx.replace(policy="large_cot")):
                start = time.perf_counter()
                out = await graph.ainvoke(inputs, context=context, output_keys=_KEYS)
                outs.append((out, MAIResult.from_output(out, time.perf_counter() - start)))
            (mai_out, mai), (_, cot) = outs
            rows.append(DemoRow(item.template, row["question"], row.get("options"),
                                row["answer"], row["kind"], mai, cot,
                                mai_out.get("reasoning"), mai_out.get("transfer")))  # fmt: skip
        return rows

    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = asyncio.run(go(Path(tmp)))
    finally:
        shutdown_backends(small, large)
    if as_json:
        print(json.dumps([r.to_dict() for r in rows], indent=1))
        return 0
    say("")
    say(format_rows(rows))
    shown: set[str] = set()
    fixed = next((i for i, r in enumerate(rows, 1) if r.mai.route == "transfer"
                  and r.right(r.mai.answer) and not r.right(r.mai.large_answer)), None)  # fmt: skip
    if fixed is not None:
        r = rows[fixed - 1]
        shown.add("transfer")
        say(f"\n=== question {fixed}: the transfer changed the large model's answer "
            f"({r.mai.large_answer} -> {r.mai.answer}, gold {r.gold}) " + "=" * 20)  # fmt: skip
        say(r.mai.format())
        say(f"reasoning: {r.reasoning!r} (the small model's)")
        say(f"read:      {r.transfer!r} (what the large model read of it)")
    for i, r in enumerate(rows, 1):
        if r.mai.route not in shown:
            shown.add(r.mai.route)
            say(f"\n=== question {i}, route {r.mai.route} " + "=" * 40)
            say(r.mai.format())
            if r.reasoning:
                say(f"reasoning: {r.reasoning!r} (the small model's)")
            if r.transfer is not None and r.mai.route == "transfer":
                say(f"read:      {r.transfer!r} (what the large model read of it)")
    return 0
