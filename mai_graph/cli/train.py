"""The pair trainer's arguments, and its training child: ``python -m mai_graph.cli.train``.

``mai-graph train-pair`` (registered by :mod:`mai_graph.cli.pair`) takes these arguments and
runs :func:`mai_graph.pair.train.train_pair`, which starts one child per model with
``python -m mai_graph.cli.train OUT --child small`` (``large``): each child trains its model
(:func:`mai_graph.pair.train.train_role`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from mai_graph.errors import ConfigError

__all__ = ["add_arguments", "build_parser", "main", "train_from_args"]


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``mai-graph train-pair`` (and ``python -m mai_graph.cli.train``)."""
    from mai_graph.pair import train

    p = argparse.ArgumentParser(
        prog="mai-graph train-pair", description=(train.__doc__ or "").split("\n\n")[0]
    )
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the training arguments to ``p``."""
    p.add_argument("out", help="where to write small/, large/ and manifest.json")
    p.add_argument(
        "--minutes", type=float, nargs="+", default=[10.0, 32.0], metavar="M",
        help="wall-time budget: one number for both models, or small and large (default 10 32)",
    )  # fmt: skip
    p.add_argument(
        "--steps", type=int, nargs="+", metavar="N",
        help="fixed steps instead of a time budget (one number, or small and large)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--task", default="v1", choices=["v1", "v2", "v3", "v4"],
        help="v1: the first pair's task; v2: compositional questions where reasoning helps; "
        "v3: arrows to follow, where the large model needs reasoning; v4: arrows followed "
        "from a named cell",
    )  # fmt: skip
    p.add_argument("--heldout", type=int, default=1000, help="held-out items to score")
    p.add_argument("--heldout-seed", type=int, default=1000, help="seed of the held-out items")
    p.add_argument(
        "--speed", default="vllm", choices=["vllm", "transformers", "skip"],
        help="engine that measures per-token speed (skip: the speed gate fails)",
    )  # fmt: skip
    p.add_argument("--engine-lock", help="a lock file to hold while engines run (shared machines)")
    p.add_argument(
        "--eval-items", type=int, default=0, metavar="N",
        help="also evaluate every policy on N held-out items on vLLM and check the reasoning "
        "and transfer gates (mai_graph.pair.gates; 300 for the v2 pair)",
    )  # fmt: skip
    p.add_argument(
        "--eval-concurrency", type=int, default=1, metavar="N",
        help="runs in flight per policy in that evaluation (default 1: each run's latency is "
        "its own; with branches every MAI run makes all its calls, which at higher "
        "concurrency slow the calls on its replayed route)",
    )  # fmt: skip
    p.add_argument("--work", help="scratch folder (default OUT.work)")
    p.add_argument("--save-anyway", action="store_true", help="save even if a gate fails")
    p.add_argument(
        "--from-work", action="store_true",
        help="no training: score, measure and check the models already in the scratch folder",
    )  # fmt: skip
    p.add_argument(
        "--retrain", choices=["small", "large"],
        help="train only this model again, keeping the tokenizer and the other model in the "
        "scratch folder (the manifest records each model's own budget)",
    )  # fmt: skip
    p.add_argument(
        "--init-from", metavar="WORK",
        help="continue the models trained in WORK, a scratch folder or a saved pair (their "
        "weights and records; the data streams go on where they stopped) instead of starting "
        "afresh; with --retrain only that model",
    )  # fmt: skip
    p.add_argument(
        "--lr-scale", type=float, default=1.0, metavar="F",
        help="scale the spec's learning rate (e.g. 0.5 when continuing with --init-from)",
    )  # fmt: skip
    p.add_argument("--child", choices=["small", "large"], help=argparse.SUPPRESS)


def train_from_args(args: argparse.Namespace) -> int:
    """:func:`~mai_graph.pair.train.train_pair` with the arguments of :func:`add_arguments`."""
    from mai_graph.pair.train import train_pair

    return train_pair(
        args.out, minutes=args.minutes, steps=args.steps, seed=args.seed, task=args.task,
        heldout=args.heldout, heldout_seed=args.heldout_seed, speed=args.speed,
        engine_lock=args.engine_lock, eval_items=args.eval_items,
        eval_concurrency=args.eval_concurrency, work=args.work,
        save_anyway=args.save_anyway, from_work=args.from_work, retrain=args.retrain,
        init_from=args.init_from, lr_scale=args.lr_scale,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the whole training, or with ``--child ROLE`` one model's."""
    args = build_parser().parse_args(argv)
    for name in ("steps", "minutes"):
        value = getattr(args, name)
        if value and len(value) > 2:
            raise ConfigError(
                f"--{name} takes one or two numbers (small, large)", parameter=f"--{name}",
                value=value,
            )  # fmt: skip
    if args.child:
        from mai_graph.pair.train import train_role

        train_role(
            args.child, Path(args.work), seed=args.seed,
            seconds=None if args.steps else 60 * args.minutes[0],
            steps=args.steps[0] if args.steps else None,
            heldout_n=args.heldout, heldout_seed=args.heldout_seed, task=args.task,
            init_from=Path(args.init_from) if args.init_from else None,
            lr_scale=args.lr_scale,
        )  # fmt: skip
        return 0
    return train_from_args(args)


if __name__ == "__main__":
    sys.exit(main())
