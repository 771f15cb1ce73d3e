"""``mai-graph eval``, ``mai-graph calibrate`` and ``mai-graph synth-data``.

:func:`register` adds the three commands to ``mai-graph``'s parser.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from mai_graph.context import MAIContext, load_settings
from mai_graph.errors import ConfigError
from mai_graph.results import record

__all__ = ["load_context_file", "register"]

EXIT_OK, EXIT_ERROR = 0, 1
_BACKENDS = ("fake", "vllm", "transformers", "openai", "simulated", "oracle")

_EVAL_EPILOG = """\
Runs each policy over the dataset (policies one after the other, samples --concurrency at a
time), appends every generation to OUT/records.jsonl, and writes OUT/report.json, report.md
and PNG plots. Run the same command again to resume: finished samples are not redone.

--sparsify-ablation measures the transfer per sparsify strategy and keep ratio instead (the
small model reasons once per sample; OUT/ablation.json and ablation.md).

--branches records every branch of the mai runs (gate never, no S2 exit): the report then
replays MAI under the context's gate settings, and `mai-graph calibrate --records OUT` can
pick settings offline. --backend simulated / oracle answer from the dataset's gold answers
(no model) to check the harness; --sim sets the simulation (e.g. --sim small=0.5).
"""

_CALIBRATE_EPILOG = """\
Replays the mai runs recorded with --branches under a grid of gate settings (gate,
agree_confident threshold, S2 exit, large_confident_exit, recorded keep ratios), picks the
setting that meets the objective on a calibration split and reports it on the held-out split.
Writes OUT/context.json (the chosen settings: give it to eval --context, or paste it into
LangGraph Studio's context), calibration.json, calibration.md and calibration_curve.png.
Exit code 1 when no setting meets the objective.
"""


def report_figures(report: dict[str, Any]) -> dict[str, Any]:
    """A report's figures for its results file, without its per-sample rows and sweep curve.

    report.json keeps both. In a results file their thousands of incidental numbers would let
    a figure the docs quote match one of them by chance (scripts/check_figures.py).

    >>> report_figures({"samples": [1], "policies": {}, "cost_quality": {"n": 2, "curve": []}})
    {'policies': {}, 'cost_quality': {'n': 2}}
    """
    out = {k: v for k, v in report.items() if k != "samples"}
    if isinstance(out.get("cost_quality"), dict):
        out["cost_quality"] = {k: v for k, v in out["cost_quality"].items() if k != "curve"}
    return out


def load_context_file(path: str | Path) -> dict[str, Any]:
    """Read a context file (see :func:`mai_graph.context.load_settings`)."""
    return load_settings(path)


def _context(args: argparse.Namespace) -> MAIContext:
    from mai_graph.cli import context_from_args

    return context_from_args(args, keep_ratio=args.keep_ratio, cot_max_tokens=args.cot_max_tokens)


def _csv(raw: str, what: str) -> list[str]:
    items = [x.strip() for x in raw.split(",") if x.strip()]
    if not items:
        raise ConfigError(f"{what} is empty", parameter=what, value=raw)
    return items


def _ratios(raw: str | None) -> list[float]:
    if not raw:
        return []
    try:
        return [float(x) for x in _csv(raw, "--keep-ratios")]
    except ValueError:
        raise ConfigError(
            f"--keep-ratios must be numbers, got {raw!r}",
            parameter="--keep-ratios",
            value=raw,
            fix="e.g. --keep-ratios 0.1,0.5,1",
        ) from None


def _backends(args: argparse.Namespace, samples: Any, context: Any = None) -> tuple[Any, Any]:
    if args.backend in ("simulated", "oracle"):
        from mai_graph.eval.simulate import SimConfig, simulated_pair

        base = SimConfig.oracle() if args.backend == "oracle" else None
        return simulated_pair(samples, SimConfig.parse(args.sim, base))
    if args.sim:
        raise ConfigError(
            "--sim applies to --backend simulated or oracle", parameter="--sim", value=args.sim
        )
    from mai_graph.cli.backends import backends_from_args

    return backends_from_args(args, context=context)


def _cmd_eval(args: argparse.Namespace) -> int:
    from mai_graph.eval.cost import parse_prices
    from mai_graph.eval.records import read_records
    from mai_graph.eval.report import build_report, format_table, write_report

    prices = parse_prices(args.price or [])  # before a long run: a bad price fails now
    out = Path(args.out)
    if args.sparsify_ablation:
        return _ablation(args, out)
    if not args.report_only:
        if not args.data:
            raise ConfigError("--data is required", parameter="--data", fix="give a dataset file")
        _evaluate(args, out)
    records = read_records(out)
    if not records.runs:
        skipped = f" ({len(records.skipped)} skipped as bad rows)" if records.skipped else ""
        raise ConfigError(
            f"no finished runs in {out}{skipped}",
            parameter="--out",
            value=str(out),
            fix="fix the dataset's bad rows and run eval again" if skipped else "run eval first",
        )
    predictor = None
    if args.latency_model:
        from mai_graph.latency.model import LatencyModel

        predictor = LatencyModel.load(args.latency_model).report_predictor(
            f"latency model {Path(args.latency_model).name}"
        )
    report = build_report(records, latency_model=predictor, prices=prices)
    written = write_report(report, out, plots=not args.no_plots)
    record(args, "report", report_figures(report))
    print(format_table(report))
    print()
    for problem in records.problems:
        print(f"records: {problem}", file=sys.stderr)
    print(f"report: {written['report.md']} (and report.json, {len(written) - 2} plots)")
    return EXIT_OK


def _evaluate(args: argparse.Namespace, out: Path) -> None:
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.eval.datasets import load_dataset
    from mai_graph.eval.runner import arun_eval

    ctx = _context(args)
    dataset = load_dataset(
        args.data,
        format=args.format,
        image_root=args.image_root,
        on_bad_row=args.on_bad_row,
        limit=args.limit,
    )
    for problem in dataset.problems:
        print(f"skipped: {problem}", file=sys.stderr)
    from mai_graph.eval.records import RECORDS_FILE
    from mai_graph.files import output_folder

    output_folder(out, flag="--out", what="evaluation",
                  owns=lambda f: (f / RECORDS_FILE).is_file())  # fmt: skip
    samples = dataset.samples
    if args.circular:
        from mai_graph.eval.circular import circular_variants

        samples = circular_variants(samples)
    ratios = _ratios(args.keep_ratios)
    sized = ctx.model_copy(update={"keep_ratio": max([ctx.keep_ratio, *ratios])})
    small, large = _backends(args, samples, sized)

    async def go() -> Any:
        try:
            await start_backends(small, large)
            return await arun_eval(
                samples,
                small,
                large,
                out_dir=out,
                policies=_csv(args.policies, "--policies"),
                context=ctx,
                concurrency=args.concurrency,
                branches=args.branches,
                keep_ratios=_ratios(args.keep_ratios),
                transfer_variants=_csv(args.transfer_variants, "--transfer-variants"),
                progress=not args.no_progress,
                data=str(dataset.path),
                on_bad_row=args.on_bad_row,
                bad_rows=dataset.problems,
            )
        finally:
            shutdown_backends(small, large)

    summary = asyncio.run(go())
    for bad in summary.bad_rows:
        print(f"skipped: {bad}", file=sys.stderr)
    print(
        f"{summary.done} runs done, {summary.skipped} already recorded, "
        f"{len(dataset.problems)} bad rows skipped when read, {len(summary.bad_rows)} runs "
        f"skipped as bad rows ({summary.elapsed_s:.1f} s)",
        file=sys.stderr,
    )


def _ablation(args: argparse.Namespace, out: Path) -> int:
    """``eval --sparsify-ablation``: transfer accuracy per sparsify strategy and keep ratio."""
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.eval.ablation import arun_ablation, format_ablation
    from mai_graph.eval.datasets import load_dataset
    from mai_graph.files import output_folder

    if not args.data:
        raise ConfigError("--data is required", parameter="--data", fix="give a dataset file")
    strategies = _csv(args.ablation_strategies, "--ablation-strategies")
    try:
        ratios = [float(x) for x in _csv(args.ablation_ratios, "--ablation-ratios")]
    except ValueError:
        raise ConfigError(
            f"--ablation-ratios must be numbers, got {args.ablation_ratios!r}",
            parameter="--ablation-ratios", fix="e.g. --ablation-ratios 0.1,0.2,0.4,1",
        ) from None  # fmt: skip
    ctx = _context(args)
    dataset = load_dataset(args.data, format=args.format, image_root=args.image_root,
                           on_bad_row=args.on_bad_row, limit=args.limit)  # fmt: skip
    output_folder(out, flag="--out", what="ablation",
                  owns=lambda f: (f / "ablation.json").is_file())  # fmt: skip
    small, large = _backends(args, dataset.samples, ctx.model_copy(update={"keep_ratio": 1.0}))

    async def go() -> Any:
        try:
            await start_backends(small, large)
            return await arun_ablation(dataset.samples, small, large, context=ctx,
                                       strategies=strategies, ratios=ratios,
                                       concurrency=args.concurrency)  # fmt: skip
        finally:
            shutdown_backends(small, large)

    result = asyncio.run(go())
    result["data"] = str(dataset.path)
    result["backend"] = args.backend
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablation.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    record(args, "ablation", result)
    table = format_ablation(result)
    (out / "ablation.md").write_text(f"# Sparsification ablation\n\n{table}\n", encoding="utf-8")
    print(table)
    print(f"\nablation: {out / 'ablation.md'} (and ablation.json)")
    return EXIT_OK


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from mai_graph.eval.calibrate import calibrate, context_file
    from mai_graph.eval.records import read_records

    records = read_records(args.records)
    result = calibrate(
        records,
        target_accuracy=args.target_accuracy,
        max_transfer_share=args.max_transfer_share,
        calibration_share=args.calibration_share,
        confidence=args.confidence,
        seed=args.seed,
    )
    from mai_graph.files import output_folder

    out = output_folder(
        Path(args.out) if args.out else Path(args.records) / "calibration",
        flag="--out", what="calibration", owns=lambda f: (f / "calibration.json").is_file(),
    )  # fmt: skip
    data = result.to_dict()
    plots: dict[str, Path] = {}
    if not args.no_plots:
        from mai_graph.eval.plots import plot_calibration

        plots = plot_calibration(data, out)
    (out / "calibration.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    # its figures, without the curve of every setting tried (calibration.json keeps it)
    record(args, "calibration", {k: v for k, v in data.items() if k != "curve"})
    (out / "calibration.md").write_text(_calibration_md(data, plots), encoding="utf-8")
    print(_calibration_text(data))
    if result.chosen is None:
        print(f"calibration: {out / 'calibration.md'} (no context file written)")
        return EXIT_ERROR
    context_path = out / "context.json"
    context_path.write_text(json.dumps(context_file(result), indent=1) + "\n", encoding="utf-8")
    print(f"context file: {context_path}")
    print(f"calibration: {out / 'calibration.md'}")
    return EXIT_OK


def _objective_text(data: dict[str, Any]) -> str:
    obj = data["objective"]
    if "target_accuracy" in obj:
        return f"accuracy >= {obj['target_accuracy']:g}"
    return f"transfer share <= {obj['max_transfer_share']:g}"


def _score_text(s: dict[str, Any]) -> str:
    from mai_graph.eval.report import percent

    gap = s["gap_recovered"]
    return (
        f"accuracy {s['accuracy']:.3f}, transfer {100 * s['transfer_share']:.1f}%, "
        f"large beyond short {100 * s['large_share']:.1f}%, "
        f"mean {1000 * s['mean_latency_s']:.0f} ms"
        + ("" if gap is None else f", gap recovered {percent(gap)}")
        + f" (n={s['n']})"
    )


def _calibration_text(data: dict[str, Any]) -> str:
    split = data["split"]
    lines = [
        f"objective: {_objective_text(data)} at confidence {data['objective']['confidence']:g}"
        f" ({split['calibration']} calibration / {split['held_out']} held-out samples, "
        f"{len(data['curve'])} settings)",
    ]
    if data["chosen"] is None:
        best = max(data["curve"], key=lambda s: s["accuracy"])
        lines.append(f"no setting meets the objective; the most accurate: {best['label']}: "
                     f"{_score_text(best)}")  # fmt: skip
        return "\n".join(lines)
    lines.append(f"chosen:     {data['chosen']['label']}")
    lines.append(f"calibration: {_score_text(data['chosen'])}")
    held = data["held_out"]
    verdict = "meets" if data["held_out_met"] else "MISSES"
    lines.append(f"held out:    {_score_text(held)} -> {verdict} the objective")
    lines += _rules_text(data)
    return "\n".join(lines)


def _rules_text(data: dict[str, Any]) -> list[str]:
    """Each gate rule at plain agreement's accuracy: early exits and latency, both splits."""
    rows = [r for r in data.get("rules") or () if r.get("setting")]
    if not rows:
        return []
    lines = ["", "gate rules at plain agreement's accuracy (calibration -> held out):"]
    for r in rows:
        cal, held = r["calibration"], r["held_out"]
        lines.append(
            f"  {r['rule']:<16} acc {cal['accuracy']:.3f} -> {held['accuracy']:.3f}   "
            f"early exits {100 * cal['early_exit_share']:.1f}% -> "
            f"{100 * held['early_exit_share']:.1f}%   mean {1000 * cal['mean_latency_s']:.0f} -> "
            f"{1000 * held['mean_latency_s']:.0f} ms   [{r['setting']}]"
        )
    return lines


def _calibration_md(data: dict[str, Any], plots: dict[str, Path]) -> str:
    lines = ["# MAI calibration", "", "```", _calibration_text(data), "```", ""]
    lines += [
        "Settings are replayed from records with every branch; a setting qualifies when the "
        f"one-sided Wilson bound at confidence {data['objective']['confidence']:g} meets the "
        "objective on the calibration split.",
        "",
        "## Pareto front (calibration split)",
        "",
        "| setting | accuracy | gap recovered | transfer | mean ms |",
        "|---|---:|---:|---:|---:|",
    ]
    pareto = set(data["pareto"])
    for s in data["curve"]:
        if s["label"] in pareto:
            gap = "-" if s["gap_recovered"] is None else f"{100 * s['gap_recovered']:.1f}%"
            lines.append(
                f"| {s['label']} | {s['accuracy']:.3f} | {gap} | "
                f"{100 * s['transfer_share']:.1f}% | {1000 * s['mean_latency_s']:.0f} |"
            )
    for title, path in plots.items():
        lines += ["", f"![{title}]({path.name})"]
    return "\n".join(lines) + "\n"


def _cmd_synth(args: argparse.Namespace) -> int:
    from mai_graph.eval.synthetic import make_synthetic, synthetic_folder
    from mai_graph.files import output_folder

    output_folder(args.dir, flag="DIR", what="synthetic dataset", owns=synthetic_folder)
    path = make_synthetic(args.dir, n=args.n, seed=args.seed, size=args.size, task=args.task)
    print(f"{args.n} samples ({args.task}): {path}")
    return EXIT_OK


def _add_backend_flags(p: argparse.ArgumentParser) -> None:
    from mai_graph.cli.backends import add_backend_flags
    from mai_graph.deploy.select import BACKENDS

    add_backend_flags(
        p,
        kinds=(*BACKENDS, "simulated", "oracle"),
        kinds_help="; simulated / oracle: answers from the dataset's gold answers at set "
        "accuracies (no model)",
    )
    p.add_argument(
        "--sim",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="simulated backend setting, e.g. --sim small=0.5 --sim error_correlation=0.8",
    )


def register(sub: Any) -> None:
    """Add ``eval``, ``calibrate`` and ``synth-data`` to ``mai-graph``'s subparsers."""
    fmt = argparse.RawDescriptionHelpFormatter
    ev = sub.add_parser(
        "eval", help="evaluate policies on a dataset (accuracy, latency, routes)",
        epilog=_EVAL_EPILOG, formatter_class=fmt,
    )  # fmt: skip
    ev.add_argument("--data", help="dataset file (JSONL, MMBench TSV, POPE or ChartQA JSON)")
    ev.add_argument("--format", default="auto", help="auto | jsonl | mmbench | pope | chartqa")
    ev.add_argument("--image-root", help="folder of relative image paths (default: the file's)")
    ev.add_argument(
        "--on-bad-row", default="skip", choices=["skip", "fail"],
        help="a row that cannot be used (unreadable, an image that does not decode, found when "
        "the dataset is read or during its run): skip it (listed, counted in the report) or fail",
    )  # fmt: skip
    ev.add_argument("--limit", type=int, help="only the first N good samples")
    ev.add_argument(
        "--circular",
        action="store_true",
        help="MMBench's CircularEval: ask each multiple-choice question once per option, the "
        "option texts rotated; it counts only if right every time (circular_accuracy)",
    )
    ev.add_argument(
        "--policies",
        default="mai,small,large,small_cot,large_cot",
        help="comma-separated subset of mai,small,large,small_cot,large_cot",
    )
    ev.add_argument("--concurrency", type=int, default=1, help="runs in flight per policy")
    ev.add_argument("--out", default="mai-eval", help="report folder (default ./mai-eval)")
    ev.add_argument(
        "--branches", action="store_true", help="record every branch of mai runs (calibration)"
    )
    ev.add_argument(
        "--keep-ratios", help="with --branches: more keep ratios to record, e.g. 0.1,0.5"
    )
    ev.add_argument(
        "--transfer-variants", default="full", metavar="full[,masked]",
        help="with --branches: also record each transfer answer with the small model's stated "
        "final answer left out of the reasoning (masked): reading vs copying",
    )  # fmt: skip
    ev.add_argument(
        "--sparsify-ablation", action="store_true",
        help="instead of the policies: each sample reasons once, then the transfer is forked "
        "for every sparsify strategy and keep ratio (transfer accuracy, tokens read, dropped "
        "mass); writes OUT/ablation.json and ablation.md",
    )  # fmt: skip
    ev.add_argument(
        "--ablation-strategies", default="none,surprisal,attention,relevance",
        help="with --sparsify-ablation: the strategies (attention needs the transformers backend)",
    )  # fmt: skip
    ev.add_argument(
        "--ablation-ratios", default="0.1,0.2,0.4,1",
        help="with --sparsify-ablation: the keep ratios",
    )  # fmt: skip
    ev.add_argument(
        "--price", action="append", metavar="ROLE=IN,OUT[,CACHED]",
        help="token prices per million (prompt, generated, cached prompt) of the small or large "
        "model, e.g. --price small=0.1,0.4 --price large=0.5,2,0.05: cost per question",
    )  # fmt: skip
    ev.add_argument("--context", help="context file: a JSON object of MAIContext fields")
    ev.add_argument("--keep-ratio", type=float, help="share of reasoning kept")
    ev.add_argument("--cot-max-tokens", type=int, help="reasoning budget")
    ev.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE",
        help="any other MAIContext field, e.g. --set gate=agree_confident (repeatable)",
    )  # fmt: skip
    _add_backend_flags(ev)
    ev.add_argument(
        "--latency-model",
        metavar="FILE",
        help="a latency model (mai-graph profile --out): modelled latency next to measured",
    )
    ev.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.add_argument(
        "--report-only", action="store_true", help="rebuild the report from OUT's records"
    )
    ev.set_defaults(func=_cmd_eval)

    cal = sub.add_parser(
        "calibrate", help="pick gate settings offline from recorded branches",
        epilog=_CALIBRATE_EPILOG, formatter_class=fmt,
    )  # fmt: skip
    cal.add_argument("--records", required=True, help="an eval folder (records.jsonl)")
    goal = cal.add_mutually_exclusive_group(required=True)
    goal.add_argument("--target-accuracy", type=float, help="least accuracy to keep")
    goal.add_argument("--max-transfer-share", type=float, help="most runs allowed to transfer")
    cal.add_argument(
        "--calibration-share", type=float, default=0.5, help="share used to pick (rest held out)"
    )
    cal.add_argument(
        "--confidence", type=float, default=0.9, help="one-sided confidence (0: point estimate)"
    )
    cal.add_argument("--seed", type=int, default=0, help="seed of the split")
    cal.add_argument("--out", help="output folder (default RECORDS/calibration)")
    cal.add_argument("--no-plots", action="store_true", help="skip the PNG plot")
    cal.set_defaults(func=_cmd_calibrate)

    syn = sub.add_parser("synth-data", help="draw a synthetic dataset (shapes, bar charts)")
    syn.add_argument("dir", help="output folder (images/ and data.jsonl)")
    syn.add_argument("--n", type=int, default=50, help="number of samples")
    syn.add_argument("--seed", type=int, default=0)
    syn.add_argument("--size", type=int, default=128, help="image side in pixels")
    syn.add_argument(
        "--task", default="v1", choices=["v1", "v2", "v3", "v4"],
        help="v1: the first pair's five templates; v2: compositional questions (the v2 pair's); "
        "v3: arrows to follow (the v3 pair's); v4: arrows followed from a named cell",
    )  # fmt: skip
    syn.set_defaults(func=_cmd_synth)
