"""``mai-graph profile``: measure a model pair's engines and fit the latency model.

:func:`register` adds the command to ``mai-graph``'s parser; the measuring and the predictions
are :mod:`mai_graph.latency.profile`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pydantic import ValidationError

from mai_graph.errors import ConfigError
from mai_graph.latency.model import LatencyModel, Workload
from mai_graph.results import record

__all__ = ["register"]

EXIT_OK = 0

_EPILOG = """\
Measures each engine's prefill and decode costs (a few prompt and output lengths, fresh
prompts and images), the contention of the two concurrent verification calls and the graph's
own overhead, fits the latency model and prints per-route latency, MAI's expected latency and
speedup over large_cot at several agreement rates, and the break-even agreement rate. Every
number derived from the model is labelled "modelled"; only the fitted speeds are measured.

--what-if predicts a deployment from given decode speeds (tokens/s) without any engine:
  mai-graph profile --what-if small=60,large=45 --cot-tokens 300
(also small_prefill=, large_prefill= tokens/s, small_call_ms=, large_call_ms=, overlap=).
--from FILE prints a saved model's predictions; eval --latency-model FILE compares them with
measured route latencies.
"""


def _size(raw: str) -> tuple[int, int]:
    w, sep, h = raw.lower().partition("x")
    try:
        size = (int(w), int(h))
    except ValueError:
        size = (0, 0)
    if not sep or min(size) < 16:
        raise ConfigError(
            f"--image-size must be WIDTHxHEIGHT (each >= 16), got {raw!r}",
            parameter="--image-size",
            value=raw,
            fix="e.g. --image-size 320x256",
        )
    return size


def _rates(raw: str) -> list[float]:
    try:
        rates = [float(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        rates = []
    if not rates or any(not 0 <= r <= 1 for r in rates):
        raise ConfigError(
            f"--agree-rates must be numbers in [0, 1], got {raw!r}",
            parameter="--agree-rates",
            value=raw,
            fix="e.g. --agree-rates 0.5,0.7,0.9",
        )
    return rates


def _workload_from(args: argparse.Namespace, base: Workload) -> Workload:
    changes: dict[str, Any] = {}
    for flag, field in (
        ("cot_tokens", "cot_tokens"),
        ("large_cot_tokens", "large_cot_tokens"),
        ("keep_ratio", "keep_ratio"),
        ("prompt_tokens", "prompt_tokens"),
    ):
        value = getattr(args, flag)
        if value is not None:
            changes[field] = value
    if changes.get("prompt_tokens") and base.cot_prompt_tokens:
        changes["cot_prompt_tokens"] = (
            base.cot_prompt_tokens - base.prompt_tokens + (changes["prompt_tokens"])
        )
    try:
        return Workload(**{**base.model_dump(), **changes})
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-")
        raise ConfigError(
            f"{flag}: {first['msg']}, got {first.get('input')!r}", parameter=flag
        ) from None


def _cmd_profile(args: argparse.Namespace) -> int:
    from mai_graph.latency.profile import format_model, predictions

    rates = _rates(args.agree_rates)
    if not 0 <= args.s2_exit_rate <= 1:
        raise ConfigError(
            f"--s2-exit-rate must be in [0, 1], got {args.s2_exit_rate}",
            parameter="--s2-exit-rate",
            value=args.s2_exit_rate,
        )
    sources = [bool(args.what_if), bool(args.from_file)]
    if sum(sources) > 1:
        raise ConfigError(
            "--what-if and --from exclude each other",
            parameter="--what-if",
            fix="give speeds or a saved profile, not both",
        )
    if args.what_if:
        model = LatencyModel.what_if(args.what_if)
    elif args.from_file:
        model = LatencyModel.load(args.from_file)
    else:
        model = _measure(args)
    if args.out and not args.from_file:
        path = model.save(args.out)
        print(f"latency model: {path}", file=sys.stderr)
    workload = _workload_from(args, model.workload)
    figures = predictions(model, workload, rates, args.s2_exit_rate)
    record(args, "predictions", figures)
    if args.json:
        print(json.dumps(figures, indent=1))
    else:
        print(format_model(model, workload, rates, args.s2_exit_rate))
    return EXIT_OK


def _measure(args: argparse.Namespace) -> LatencyModel:
    from mai_graph.latency.profile import measure_pair

    size = _size(args.image_size)
    if args.tiny is not None:
        kind = args.backend or args.backend_default
        if kind not in ("vllm", "transformers"):
            raise ConfigError(
                "--tiny runs on --backend vllm or transformers",
                parameter="--tiny",
                value=args.backend,
            )
        from mai_graph.tiny.build import tiny_backends

        small, large = tiny_backends(kind, args.tiny or None)
    else:
        if args.backend == "fake":
            raise ConfigError(
                "profiling measures real engines; the fake backend has no speed to measure",
                parameter="--backend",
                value="fake",
                fix="use --backend vllm with --small/--large (or --tiny), or --what-if",
            )
        from mai_graph.cli.backends import backends_from_args

        small, large = backends_from_args(args, context=_plan_context(args))

    start = time.perf_counter()

    def say(line: str) -> None:
        print(f"[{time.perf_counter() - start:5.0f} s] {line}", file=sys.stderr, flush=True)

    return measure_pair(small, large, rounds=args.rounds, image_size=size, seed=args.seed, say=say)


def _plan_context(args: argparse.Namespace) -> Any:
    """The settings the memory plan sizes a profile's engines for (its CoT length)."""
    from mai_graph.context import MAIContext

    cot = getattr(args, "cot_tokens", None)
    return MAIContext(cot_max_tokens=max(512, int(cot))) if cot else None


def register(sub: Any) -> None:
    """Add ``profile`` to ``mai-graph``'s subparsers."""
    from mai_graph.cli.backends import add_backend_flags

    p = sub.add_parser(
        "profile",
        help="measure the engines and fit the latency model (per-route latency, speedup, "
        "break-even)",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_backend_flags(p, default="vllm", shapes=False)
    p.add_argument(
        "--tiny",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="profile the tiny local pair (built if needed; default folder: cache)",
    )
    p.add_argument("--rounds", type=int, default=3, help="repeats of each measurement (>= 2)")
    p.add_argument("--image-size", default="320x256", help="test image size, WIDTHxHEIGHT")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="save the fitted model as JSON (for eval --latency-model)")
    p.add_argument("--from", dest="from_file", metavar="FILE", help="print a saved model")
    p.add_argument(
        "--what-if",
        metavar="SPEC",
        help="decode speeds (tokens/s) instead of measuring, e.g. small=60,large=45",
    )
    p.add_argument("--cot-tokens", type=int, help="reasoning length N_S to predict for")
    p.add_argument("--large-cot-tokens", type=int, help="large_cot reasoning length N_L")
    p.add_argument("--keep-ratio", type=float, help="share of the reasoning transferred")
    p.add_argument("--prompt-tokens", type=int, help="short-answer prompt size, image included")
    p.add_argument(
        "--agree-rates", default="0.5,0.7,0.9", help="agreement rates for the expected latency"
    )
    p.add_argument(
        "--s2-exit-rate",
        type=float,
        default=0.0,
        help="share of disagreements settled by the S2 answer (default 0)",
    )
    p.add_argument("--json", action="store_true", help="print the model and predictions as JSON")
    p.set_defaults(func=_cmd_profile)
