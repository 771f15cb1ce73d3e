"""``mai-graph plan``: will this lineup fit the card(s), and with which shares and context."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import Any

from mai_graph.errors import ConfigError

__all__ = ["register"]

EXIT_OK, EXIT_USAGE = 0, 2

_DESCRIPTION = textwrap.dedent(
    """\
    Plans the memory of the lineup's in-process vLLM engines before any starts: per engine
    its weights, estimated activation peak, KV pool, KV bytes per token, the context a MAI run
    needs, the max_model_len and gpu_memory_utilization chosen, and how many concurrent runs
    the KV pools hold; totals against the card. Reads each model's local config.json (and
    safetensors headers): nothing is downloaded, no engine starts.

    --gpu-memory SIZE plans for a card of SIZE (a dry run, e.g. 80GiB or 24GB; --gpus N for N
    such cards); without it the GPUs this machine has are probed, and without a GPU the plan
    is vLLM's CPU build's (KV pool = kv_cache_gib per engine). Exit code 2 when the lineup
    does not fit; the fixes that would make it fit are printed, each one tried.

    `mai-graph run`, `serve`, `eval` and `profile` apply the same plan on a GPU: the shares and
    context lengths you did not set are filled in, and a lineup that cannot fit is refused
    before the engines start.
    """
)


def _cmd_plan(args: argparse.Namespace) -> int:
    from mai_graph.cli import context_from_args
    from mai_graph.cli.backends import lineup_from_args
    from mai_graph.deploy.plan import (
        Device,
        Workload,
        host_device,
        parse_size,
        plan_memory,
        probe_devices,
    )

    if args.gpus is not None and not 1 <= args.gpus <= 64:
        raise ConfigError(
            f"--gpus must be in 1..64, got {args.gpus}", parameter="--gpus", value=args.gpus
        )
    if args.gpus is not None and args.gpu_memory is None:
        raise ConfigError(
            "--gpus plans for that many cards of --gpu-memory SIZE, and no size is given "
            "(without --gpu-memory the plan is for the GPUs this machine has)",
            parameter="--gpus",
            value=args.gpus,
            fix=f"add --gpu-memory SIZE (e.g. --gpus {args.gpus} --gpu-memory 80GiB), or drop "
            "--gpus",
        )
    ctx = context_from_args(args, keep_ratio=args.keep_ratio, cot_max_tokens=args.cot_max_tokens)
    lineup = lineup_from_args(args).checked()
    if args.gpu_memory is not None:
        size = parse_size(args.gpu_memory)
        devices = [Device("cuda", i, size, size, "", "given") for i in range(args.gpus or 1)]
    else:
        devices = probe_devices() or [host_device()]
    for flag, value, low in (("--images", args.images, 0), ("--max-pixels", args.max_pixels, 1),
                             ("--question-tokens", args.question_tokens, 1)):  # fmt: skip
        if value is not None and value < low:
            raise ConfigError(f"{flag} must be >= {low}, got {value}", parameter=flag, value=value)
    workload = Workload.from_context(
        ctx, images=args.images, max_pixels=args.max_pixels, question_tokens=args.question_tokens
    )
    plan = plan_memory(lineup, devices, workload)
    if not plan.engines:
        raise ConfigError(
            "the lineup has no in-process vLLM engine to plan",
            parameter="--backend",
            fix="plan --backend vllm models (remote and transformers models need no plan here)",
        )
    if args.json:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        print(plan.table())
    if not plan.fits:
        print(f"mai-graph: error: {plan.error()}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``plan`` to ``mai-graph``'s subcommands."""
    from mai_graph.cli import add_context_flags
    from mai_graph.cli.backends import add_backend_flags

    p = sub.add_parser(
        "plan",
        help="plan the engines' GPU memory (shares, context, concurrent runs) before starting",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_backend_flags(p, default="vllm")
    p.add_argument(
        "--gpus", type=int, help="with --gpu-memory: plan for this many such cards (default 1)"
    )
    p.add_argument("--images", type=int, help="images per question (default 1)")
    p.add_argument(
        "--max-pixels",
        type=int,
        help="pixel cap per image (default: each model's mm_processor_kwargs or processor)",
    )
    p.add_argument(
        "--question-tokens", type=int, help="tokens of a question and its options (default 256)"
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_context_flags(p)
    p.set_defaults(func=_cmd_plan)
