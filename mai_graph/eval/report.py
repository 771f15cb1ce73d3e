"""The evaluation report: ``report.json``, ``report.md``, PNG plots and the printed table.

Everything is computed from ``records.jsonl`` alone (the completion lines carry the gold
answers), so a report can be rebuilt at any time without a model:

- per policy: accuracy (mean of per-sample verdicts) and the metrics of each answer kind,
  latency (critical path, see :mod:`mai_graph.eval.replay`; mean / p50 / p95), wall time,
  generated tokens per model, the share of runs in which the large model did more than its
  short answer, route shares, and the speedup of mean latency against ``large_cot``;
- per route: share, measured mean latency, and a ``predicted_latency_s`` slot a latency model
  fills (``null`` until one is given);
- cost-quality: the share of the weak→strong accuracy gap MAI recovers against the share of
  runs that needed the transfer step, and the same for every replayable setting (a curve);
- reasoning transfer (:mod:`mai_graph.eval.transfer`): the transfer gain and the copy rate
  per policy, with the masked variant when recorded;
- tokens: generated reasoning tokens apart from answer tokens, per model; with prices
  (:mod:`mai_graph.eval.cost`), the cost per question and per 1,000 questions;
- per sample: route, answer, canonical prediction, gold and verdict, to audit the scores;
- bad rows: the dataset's rows skipped when it was read and the runs skipped because their
  image did not decode, each with its reason, and their count.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

from mai_graph.answers import canonical_gold
from mai_graph.context import MAIContext
from mai_graph.eval.calibrate import pareto_front, score_settings, settings_grid
from mai_graph.eval.cost import Price, run_cost
from mai_graph.eval.datasets import GROUP_KEY, ROTATIONS_KEY, SHIFT_KEY
from mai_graph.eval.records import RecordSet, SampleRun
from mai_graph.eval.replay import Branches, Outcome, outcome
from mai_graph.eval.scorers import headline, kind_metrics
from mai_graph.eval.transfer import transfer_analysis
from mai_graph.latency.model import MODEL_ROUTES

__all__ = [
    "LatencyModel",
    "build_report",
    "format_table",
    "percent",
    "quantile",
    "report_markdown",
    "write_report",
]

LatencyModel = Callable[[str, Sequence[Outcome]], float | None]
"""Predicts a route's latency from its runs (``route, outcomes -> seconds``), or None."""

ROUTE_ORDER = (*MODEL_ROUTES, "human")
"""Routes in display order: the latency model's, then a reviewer's answer."""


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated quantile, None for no values.

    The definition is numpy's default (``method="linear"``), which is
    :func:`statistics.quantiles` with ``method="inclusive"`` (the values are the whole
    population: the 0 and 1 quantiles are their minimum and maximum). ``q`` is taken to the
    nearest thousandth.

    >>> quantile([1, 2, 3, 4], 0.5), round(quantile([1, 2, 3, 4], 0.95), 6)
    (2.5, 3.85)
    >>> quantile([3], 0.95), quantile([4, 1, 2], 0), quantile([4, 1, 2], 1), quantile([], 0.5)
    (3.0, 1.0, 4.0, None)
    """
    if not values:
        return None
    share = Fraction(q).limit_denominator(1000)
    if len(values) == 1 or share <= 0:
        return float(min(values))
    if share >= 1:
        return float(max(values))
    cuts = statistics.quantiles(values, n=share.denominator, method="inclusive")
    return cuts[share.numerator - 1]


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _base_context(records: RecordSet) -> MAIContext:
    if not records.sessions:
        return MAIContext()
    known = set(MAIContext.model_fields)
    return MAIContext(**{k: v for k, v in records.sessions[0].context.items() if k in known})


def _verdict_row(run: SampleRun, out: Outcome) -> dict[str, Any]:
    rec = run.record
    verdict = rec.verdict(out.answer)
    return {
        "id": rec.sample,
        "policy": rec.policy,
        "route": out.route,
        "answer": out.answer,
        "prediction": verdict.prediction,
        "gold": rec.gold,
        "gold_canonical": canonical_gold(rec.gold, rec.kind, rec.options),
        "kind": rec.kind,
        "correct": verdict.correct,
        "credit": verdict.credit,
        "references": rec.references,
        "group": rec.meta.get(GROUP_KEY),
        "rotation": rec.meta.get(SHIFT_KEY),
        "rotations": rec.meta.get(ROTATIONS_KEY),
        "latency_s": out.latency_s,
        "replayed": rec.branches,
    }


def _split_tokens(out: Outcome) -> dict[str, dict[str, int]]:
    """Generated tokens on a run's path per role: reasoning (``reason`` calls) and answers."""
    split = {role: {"reasoning": 0, "answer": 0} for role in ("small", "large")}
    for call in out.path:
        part = "reasoning" if call.node == "reason" else "answer"
        split.setdefault(call.role, {"reasoning": 0, "answer": 0})[part] += call.generated_tokens
    return split


STAGES = ("queue_s", "prefill_s", "decode_s")
"""The engines' own stage timings a call record may carry."""


def _stage_summary(outs: Sequence[Outcome]) -> dict[str, Any] | None:
    """Mean seconds per run in each engine stage, summed over the calls on its path.

    Per stage, from the runs whose every path call reports it (None when no run does);
    ``image_tokens`` is the mean image tokens per run. None when no call had stage timings.
    """
    out: dict[str, Any] = {}
    for stage in STAGES:
        runs = [
            o.path for o in outs if o.path and all(getattr(c, stage) is not None for c in o.path)
        ]
        out[stage] = _mean([sum(getattr(c, stage) for c in path) for path in runs])
    images = [sum(c.image_tokens or 0 for c in o.path) for o in outs if o.path]
    out["image_tokens"] = (
        _mean(images) if any(c.image_tokens is not None for o in outs for c in o.path) else None
    )
    return out if any(out[stage] is not None for stage in STAGES) else None


def _cost_summary(outs: list[Outcome], prices: dict[str, Price] | None) -> dict[str, Any] | None:
    if not prices:
        return None
    costs = [run_cost(o, prices) for o in outs]
    if any(c is None for c in costs):
        return None
    mean = _mean([c for c in costs if c is not None])
    return {"per_question": mean, "per_1000": None if mean is None else 1000 * mean}


def _policy_summary(
    rows: list[dict[str, Any]],
    outs: list[Outcome],
    latency_model: LatencyModel | None,
    prices: dict[str, Price] | None = None,
) -> dict[str, Any]:
    n = len(rows)
    splits = [_split_tokens(o) for o in outs]
    latencies = [o.latency_s for o in outs]
    walls = [o.wall_s for o in outs if o.wall_s is not None]
    by_route: dict[str, list[Outcome]] = {}
    for o in outs:
        by_route.setdefault(o.route, []).append(o)
    routes = {}
    for route in sorted(by_route, key=lambda r: (ROUTE_ORDER + (r,)).index(r)):
        group = by_route[route]
        routes[route] = {
            "n": len(group),
            "share": len(group) / n,
            "mean_latency_s": _mean([o.latency_s for o in group]),
            "predicted_latency_s": latency_model(route, group) if latency_model else None,
            "stages_s": _stage_summary(group),
        }
    return {
        "n": n,
        "accuracy": sum(r["credit"] for r in rows) / n,
        "by_kind": kind_metrics(rows),
        "latency_s": {
            "mean": _mean(latencies),
            "p50": quantile(latencies, 0.5),
            "p95": quantile(latencies, 0.95),
        },
        "wall_s": {"mean": _mean(walls), "p50": quantile(walls, 0.5)} if walls else None,
        "generated_tokens": {
            role: _mean([o.generated.get(role, 0) for o in outs]) for role in ("small", "large")
        },
        "prompt_tokens": {
            role: _mean([o.prompt.get(role, 0) for o in outs]) for role in ("small", "large")
        },
        "reasoning_tokens": {
            role: _mean([s[role]["reasoning"] for s in splits]) for role in ("small", "large")
        },
        "answer_tokens": {
            role: _mean([s[role]["answer"] for s in splits]) for role in ("small", "large")
        },
        "cost": _cost_summary(outs, prices),
        "large_beyond_short": sum(o.large_beyond_short for o in outs) / n,
        "routes": routes,
        "replayed": any(r["replayed"] for r in rows),
    }


def _accuracy_on(rows: list[dict[str, Any]], ids: set[str]) -> float | None:
    picked = [r["credit"] for r in rows if r["id"] in ids]
    return sum(picked) / len(picked) if picked else None


def _cost_quality(
    records: RecordSet,
    rows: dict[str, list[dict[str, Any]]],
    summaries: dict[str, dict[str, Any]],
    base: MAIContext,
) -> dict[str, Any] | None:
    if "mai" not in rows:
        return None
    strong = "large_cot" if "large_cot" in rows else "large" if "large" in rows else None
    weak = "small" if "small" in rows else None
    out: dict[str, Any] = {"weak": weak, "strong": strong}
    common = {r["id"] for r in rows["mai"]}
    for p in (weak, strong):
        if p is not None:
            common &= {r["id"] for r in rows[p]}
    out["n"] = len(common)
    refs = None
    if weak and strong and common:
        w, s = _accuracy_on(rows[weak], common), _accuracy_on(rows[strong], common)
        out["accuracy"] = {weak: w, strong: s, "mai": _accuracy_on(rows["mai"], common)}
        if w is not None and s is not None and abs(s - w) > 1e-12:
            refs = (w, s)
            mai = out["accuracy"]["mai"]
            out["gap_recovered"] = (mai - w) / (s - w)
    transfer = summaries["mai"]["routes"].get("transfer", {}).get("share", 0.0)
    out["transfer_share"] = transfer
    out["large_beyond_short"] = summaries["mai"]["large_beyond_short"]
    out.setdefault("gap_recovered", None)
    runs = [r for r in records.of("mai") if r.record.branches and r.record.sample in common]
    curve: list[dict[str, Any]] = []
    if runs:
        branches = [Branches.of(r) for r in runs]
        scores = score_settings(branches, settings_grid(branches), base, references=refs)
        front = {id(s) for s in pareto_front(scores)}
        curve = [{**s.to_dict(), "pareto": id(s) in front} for s in scores]
    out["curve"] = curve
    return out


def build_report(
    records: RecordSet,
    *,
    latency_model: LatencyModel | None = None,
    policies: Sequence[str] | None = None,
    prices: dict[str, Price] | None = None,
) -> dict[str, Any]:
    """Compute the report from records (no model calls).

    Args:
        records: What :func:`~mai_graph.eval.records.read_records` returned.
        latency_model: Fills each route's ``predicted_latency_s`` (e.g. a fitted latency
            model); without one they stay ``null``.
        policies: Report only these (default: every policy in the records).
        prices: Per-model token prices (:func:`~mai_graph.eval.cost.parse_prices`): each
            policy's cost per question (``null`` without them).

    Returns:
        The report as a JSON-ready dict (the content of ``report.json``).
    """
    base = _base_context(records)
    chosen = list(policies) if policies is not None else records.policies()
    rows: dict[str, list[dict[str, Any]]] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for policy in chosen:
        runs = records.of(policy)
        if not runs:
            continue
        outs = [outcome(run, base.replace(policy=policy)) for run in runs]
        rows[policy] = [_verdict_row(run, o) for run, o in zip(runs, outs)]
        summaries[policy] = _policy_summary(rows[policy], outs, latency_model, prices)
        summaries[policy]["transfer"] = transfer_analysis(runs, outs, base)
    reference = summaries.get("large_cot", {}).get("latency_s", {}).get("mean")
    for summary in summaries.values():
        mean = summary["latency_s"]["mean"]
        summary["speedup_vs_large_cot"] = reference / mean if reference and mean else None
    session = records.sessions[-1] if records.sessions else None
    return {
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "records": str(records.path),
        "data": session.data if session else None,
        "models": session.models if session else {},
        "context": base.model_dump(),
        "branches": any(s["replayed"] for s in summaries.values()),
        "mai_settings": {
            k: getattr(base, k)
            for k in ("gate", "gate_min_prob", "s2_exit", "large_confident_exit", "keep_ratio")
        },
        "policies": summaries,
        "cost_quality": _cost_quality(records, rows, summaries, base),
        "latency_model": getattr(latency_model, "__name__", None) if latency_model else None,
        "prices": {role: vars(p) for role, p in prices.items()} if prices else None,
        "problems": list(records.problems),
        "bad_rows": _bad_rows(records),
        "samples": [row for policy in rows for row in rows[policy]],
    }


def _bad_rows(records: RecordSet) -> dict[str, Any]:
    """Rows skipped when the dataset was read (the last session's) and runs skipped later."""
    read = list(records.sessions[-1].bad_rows) if records.sessions else []
    run = [{"sample": s.sample, "policy": s.policy, "reason": s.reason}
           for s in records.skipped.values()]  # fmt: skip
    samples = {s.sample for s in records.skipped.values()}
    return {"count": len(read) + len(samples), "when_read": read, "at_run": run}


# --- text ------------------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def percent(share: float | None) -> str:
    """A share as a percentage with one decimal (``"-"`` for none; never ``-0.0%``).

    >>> percent(0.1234), percent(None), percent(-0.0001)
    ('12.3%', '-', '0.0%')
    """
    if share is None:
        return "-"
    text = f"{100 * share:.1f}%"
    return "0.0%" if text == "-0.0%" else text


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


_COLUMNS = (
    "policy", "n", "accuracy", "mean ms", "p50 ms", "p95 ms", "small tok", "large tok",
    "large>short", "speedup",
)  # fmt: skip


def _table_rows(report: dict[str, Any]) -> list[list[str]]:
    out = []
    for policy, s in report["policies"].items():
        speedup = s["speedup_vs_large_cot"]
        out.append(
            [
                policy + (" *" if s["replayed"] else ""),
                str(s["n"]),
                f"{s['accuracy']:.3f}",
                _ms(s["latency_s"]["mean"]),
                _ms(s["latency_s"]["p50"]),
                _ms(s["latency_s"]["p95"]),
                _num(s["generated_tokens"]["small"]),
                _num(s["generated_tokens"]["large"]),
                percent(s["large_beyond_short"]),
                "-" if speedup is None else f"{speedup:.2f}x",
            ]
        )
    return out


def _route_line(summary: dict[str, Any]) -> str:
    return " · ".join(
        f"{route} {percent(r['share'])} ({_ms(r['mean_latency_s'])} ms)"
        for route, r in summary["routes"].items()
    )


def _predicted_lines(report: dict[str, Any]) -> list[str]:
    """Measured next to modelled latency per route, when a latency model filled the slots."""
    rows = [
        (policy, route, r)
        for policy, s in report["policies"].items()
        for route, r in s["routes"].items()
        if r.get("predicted_latency_s") is not None
    ]
    if not rows:
        return []
    lines = ["", f"per route, measured vs modelled ({report.get('latency_model')}):"]
    for policy, route, r in rows:
        measured, modelled = r["mean_latency_s"], r["predicted_latency_s"]
        error = "" if not measured else f" ({(modelled - measured) / measured:+.1%})"
        lines.append(
            f"  {policy:<10} {route:<16} measured {_ms(measured):>6} ms   "
            f"modelled {_ms(modelled):>6} ms{error}"
        )
    return lines


def _stage_lines(report: dict[str, Any]) -> list[str]:
    """The engines' own stage timings per route, when the backends reported them."""
    rows = [
        (policy, route, r["stages_s"])
        for policy, s in report["policies"].items()
        for route, r in s["routes"].items()
        if r.get("stages_s")
    ]
    if not rows:
        return []
    lines = ["", "per route, engine stages (mean ms per run, the path's calls summed):"]
    for policy, route, st in rows:
        image = st.get("image_tokens")
        lines.append(
            f"  {policy:<10} {route:<16} queue {_ms(st['queue_s']):>6}   prefill "
            f"{_ms(st['prefill_s']):>6}   decode {_ms(st['decode_s']):>6}   image tokens "
            f"{'-' if image is None else f'{image:.0f}'}"
        )
    return lines


def format_table(report: dict[str, Any]) -> str:
    """The report as the plain-text table ``mai-graph eval`` prints."""
    rows = [list(_COLUMNS), *_table_rows(report)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_COLUMNS))]
    lines = []
    for j, row in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    mai = report["policies"].get("mai")
    if mai is not None:
        lines.append("")
        lines.append(f"mai routes: {_route_line(mai)}")
    lines += _predicted_lines(report)
    lines += _stage_lines(report)
    lines += _benchmark_lines(report)
    lines += _transfer_lines(report)
    lines += _token_lines(report)
    cq = report.get("cost_quality")
    if cq and cq.get("gap_recovered") is not None:
        lines.append(
            f"gap recovered ({cq['weak']} -> {cq['strong']}): {percent(cq['gap_recovered'])} "
            f"with {percent(cq['transfer_share'])} of runs transferring"
        )
    bad = report.get("bad_rows") or {}
    if bad.get("count"):
        lines.append(
            f"bad rows skipped: {bad['count']} ({len(bad['when_read'])} when read, "
            f"{len(bad['at_run'])} run(s) at run time; listed in report.md)"
        )
    if any(s["replayed"] for s in report["policies"].values()):
        lines.append("* replayed from records with every branch under the context's gate settings")
    lines.append("latency: critical-path model time per run (the verification calls overlap)")
    lines.append(
        "large>short: runs where the large model did more than its short answer; "
        "speedup: mean latency vs large_cot"
    )
    return "\n".join(lines)


def _copy_text(block: dict[str, Any]) -> str:
    c = block["copy"]
    return (f"copies small {percent(c['small'])}, keeps large {percent(c['large'])}, "
            f"both {percent(c['both'])}, neither {percent(c['neither'])}")  # fmt: skip


def _gain_text(block: dict[str, Any]) -> str:
    return (
        f"{percent(block['transfer_accuracy'])} vs its short answer "
        f"{percent(block['large_short_accuracy'])} ({100 * block['gain']:+.1f} points; small S2 "
        f"{percent(block['small_s2_accuracy'])}); {_copy_text(block)}"
    )


def _transfer_lines(report: dict[str, Any]) -> list[str]:
    """Transfer gain, masked transfer and copy rate per policy (where runs transferred)."""
    lines = []
    for policy, s in report["policies"].items():
        t = s.get("transfer")
        if not t:
            continue
        lines.append("")
        lines.append(f"{policy} reasoning transfer (keep ratio {t['keep_ratio']:g}):")
        blocks = [("transferred", t["transferred"]), ("  masked", t.get("masked"))]
        apart = t.get("disagreements") or {}
        blocks += [("disagreed", apart.get("full")), ("  masked", apart.get("masked"))]
        for name, block in blocks:
            if block and block["n"]:
                lines.append(f"  {name:<11} n={block['n']:<4} large after transfer "
                             f"{_gain_text(block)}")  # fmt: skip
    return lines


def _token_lines(report: dict[str, Any]) -> list[str]:
    """Reasoning and answer tokens per model, and the cost with prices."""
    lines = ["", "tokens per run (mean, reasoning / answers) and cost:"]
    for policy, s in report["policies"].items():
        r, a = s["reasoning_tokens"], s["answer_tokens"]
        part = (f"  {policy:<10} small {_num(r['small'])} / {_num(a['small'])}   "
                f"large {_num(r['large'])} / {_num(a['large'])}")  # fmt: skip
        cost = s.get("cost")
        if cost and cost["per_question"] is not None:
            part += f"   cost {cost['per_1000']:.4g} per 1,000 questions"
        lines.append(part)
    if report.get("prices"):
        lines.append("  cost: from the given prices per million tokens (inputs, not measured)")
    return lines


def _benchmark_lines(report: dict[str, Any]) -> list[str]:
    """The benchmarks' own headlines that the accuracy column does not show, per policy.

    MMBench's circular accuracy (with each policy's count of questions, and of incomplete ones
    left out) and the VQA accuracy.
    """
    lines = []
    for kind, name in (("choice", "circular_accuracy"), ("text", "vqa_accuracy")):
        found = {p: s["by_kind"][kind] for p, s in report["policies"].items()
                 if name in s["by_kind"].get(kind, {})}  # fmt: skip
        if not found:
            continue
        parts = []
        for policy, m in found.items():
            part = f"{policy} {_value(m[name])}"
            if name == "circular_accuracy":
                part += f" of {m['circular_questions']}"
                if m["circular_incomplete"]:
                    part += f" (+{m['circular_incomplete']} incomplete)"
            parts.append(part)
        unit = " (questions right in every rotation)" if name == "circular_accuracy" else ""
        lines.append(f"{name} ({kind}){unit}: {' · '.join(parts)}")
    return lines


def _value(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "| " + " | ".join(header) + " |"
    rule = "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"
    return "\n".join([head, rule, *("| " + " | ".join(r) + " |" for r in rows)])


def report_markdown(report: dict[str, Any], plots: dict[str, str] | None = None) -> str:
    """The report as Markdown (``report.md``)."""
    models = report.get("models") or {}
    lines = [
        "# MAI evaluation report",
        "",
        f"- data: `{report.get('data')}`",
        f"- models: small `{models.get('small')}`, large `{models.get('large')}`",
        f"- MAI gate settings: `{json.dumps(report['mai_settings'])}`",
        f"- created: {report['created']}",
        "",
        "## Policies",
        "",
        _md_table(_COLUMNS, _table_rows(report)),
        "",
        "Latency is the critical-path model time per run (the two verification calls overlap); "
        "`large>short` is the share of runs in which the large model did more than its short "
        "answer; speedup is mean latency against `large_cot`.",
    ]
    if report["branches"]:
        lines += [
            "Policies marked `*` were recorded with every branch and are replayed under the "
            "gate settings above.",
        ]
    lines += ["", "## Metrics by answer kind", ""]
    kind_rows = []
    for policy, s in report["policies"].items():
        for kind, m in s["by_kind"].items():
            extra = ""
            if kind == "yes_no":
                extra = (
                    f"P {m['precision']:.3f} · R {m['recall']:.3f} · F1 {m['f1']:.3f} · "
                    f"yes {percent(m['yes_ratio'])}"
                )
            name, value = headline(kind, m)
            if "circular_accuracy" in m:
                extra = (f"circular {_value(m['circular_accuracy'])} over "
                         f"{m['circular_questions']} questions "
                         f"({m['circular_incomplete']} incomplete) · per rotation "
                         f"{m['accuracy']:.3f}")  # fmt: skip
            kind_rows.append(
                [policy, kind, str(m["n"]), f"{name} {value:.3f}",
                 percent(m["unknown_ratio"]), extra]
            )  # fmt: skip
    lines.append(_md_table(["policy", "kind", "n", "metric", "unreadable", "more"], kind_rows))
    lines += ["", "## Routes", ""]
    route_rows = []
    for policy, s in report["policies"].items():
        for route, r in s["routes"].items():
            predicted = r["predicted_latency_s"]
            st = r.get("stages_s") or {}
            route_rows.append(
                [policy, route, str(r["n"]), percent(r["share"]), _ms(r["mean_latency_s"]),
                 _ms(predicted), _ms(st.get("queue_s")), _ms(st.get("prefill_s")),
                 _ms(st.get("decode_s"))]
            )  # fmt: skip
    header = ["policy", "route", "n", "share", "measured ms", "predicted ms"]
    lines.append(_md_table([*header, "queue ms", "prefill ms", "decode ms"], route_rows))
    lines += [
        "",
        "`predicted ms` is modelled, filled when a latency model is given "
        "(`eval --latency-model`; `-` until then). `queue`, `prefill` and `decode` are the "
        "engines' own stage timings per run (the path's calls summed; `-` where the backend "
        "gives none).",
    ]
    cq = report.get("cost_quality")
    if cq:
        lines += ["", "## Cost and quality", ""]
        if cq.get("gap_recovered") is not None:
            lines.append(
                f"On the {cq['n']} samples every compared policy finished, MAI recovers "
                f"**{percent(cq['gap_recovered'])}** of the accuracy gap from `{cq['weak']}` "
                f"({cq['accuracy'][cq['weak']]:.3f}) to `{cq['strong']}` "
                f"({cq['accuracy'][cq['strong']]:.3f}), with {percent(cq['transfer_share'])} of "
                f"runs needing the transfer step and {percent(cq['large_beyond_short'])} using "
                "the large model beyond its short answer."
            )
        else:
            lines.append(
                "The gap recovered needs `small` and `large_cot` (or `large`) runs on the same "
                "samples, with different accuracies."
            )
        if cq["curve"]:
            front = sorted(
                (c for c in cq["curve"] if c["pareto"]), key=lambda c: c["transfer_share"]
            )
            lines += [
                "",
                f"{len(cq['curve'])} replayable settings; the Pareto front (accuracy vs "
                "transfer share):",
                "",
                _md_table(
                    ["setting", "accuracy", "gap recovered", "transfer", "mean ms"],
                    [
                        [
                            c["label"],
                            f"{c['accuracy']:.3f}",
                            percent(c["gap_recovered"]),
                            percent(c["transfer_share"]),
                            _ms(c["mean_latency_s"]),
                        ]
                        for c in front
                    ],
                ),  # fmt: skip
            ]
    transfer = _transfer_lines(report)
    if transfer:
        lines += ["", "## Reasoning transfer", "", "```", *transfer[1:], "```", ""]
        lines.append(
            "`transferred`: runs on the transfer route; `disagreed`: every run recorded with "
            "every branch whose short answers disagreed. `masked`: the same runs with the small "
            "model's stated final answer left out of the reasoning. The copy shares say which "
            "earlier answer the large model's answer after the transfer repeats."
        )
    lines += ["", "## Tokens and cost", "", "```", *_token_lines(report)[1:], "```"]
    if plots:
        lines += ["", "## Plots", ""]
        for title, name in plots.items():
            lines.append(f"![{title}]({name})")
    bad = report.get("bad_rows") or {}
    if bad.get("count"):
        lines += ["", f"## Bad rows skipped ({bad['count']})", ""]
        lines += [f"- when read: {p}" for p in bad["when_read"]]
        lines += [f"- sample `{b['sample']}` ({b['policy']}): {b['reason']}"
                  for b in bad["at_run"]]  # fmt: skip
    if report["problems"]:
        lines += ["", "## Records skipped", ""]
        lines += [f"- {p}" for p in report["problems"]]
    lines += [
        "",
        "Per-sample verdicts are in `report.json` (`samples`).",
        "",
    ]
    return "\n".join(lines)


def write_report(
    report: dict[str, Any], out_dir: str | Path, *, plots: bool = True
) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and (with matplotlib) the PNG plots.

    Returns:
        The written files by name.
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    images: dict[str, str] = {}
    if plots:
        from mai_graph.eval.plots import plot_report

        for title, path in plot_report(report, folder).items():
            images[title] = path.name
            written[path.name] = path
    report = {**report, "plots": images}
    path = folder / "report.json"
    # JSON has no NaN or Infinity: a non-finite number here is a bug to see, not to write.
    path.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    written["report.json"] = path
    md = folder / "report.md"
    md.write_text(report_markdown(report, images), encoding="utf-8")
    written["report.md"] = md
    return written
