"""``mai-graph pair`` (the shipped trained pair: where, what, intact?) and ``mai-graph train-pair``.

:func:`register` adds both commands to ``mai-graph``'s parser.
"""

from __future__ import annotations

import argparse
from typing import Any

from mai_graph.pair import DEFAULT_PAIR, PAIRS
from mai_graph.results import record

__all__ = ["register"]

_TRAIN_EPILOG = """\
Trains the small and the large model at once, one CPU thread each (niced), for --minutes of
wall time each (or --steps), then scores both on --heldout fresh items of the synthetic
generator, measures per-token decode speed on --speed, prints the quality gates and writes
OUT/small, OUT/large and OUT/manifest.json only if every gate holds (--save-anyway to keep a
failed run). Retrain the shipped pairs with:
  mai-graph train-pair mai_graph/pair/models
  mai-graph train-pair mai_graph/pair/models_v2 --task v2 --minutes 14 38 --eval-items 300
"""


def _cmd_pair(args: argparse.Namespace) -> int:
    from mai_graph.pair import pair_root, read_manifest, verify_pair

    root = pair_root(args.dir or args.pair)
    if args.path:
        print(root)
        return 0
    manifest = read_manifest(root)
    record(args, "manifest", manifest)  # the figures the pair's tables quote
    problems = verify_pair(root)
    models = manifest["models"]
    print(f"trained pair ({manifest.get('task', 'v1')}): {root}")
    for role in ("small", "large"):
        m, acc = models[role], manifest[role]
        per = ", ".join(f"{t} {100 * a:.0f}%" for t, a in acc["by_template"].items())
        print(f"  {role:<5} {m['parameters']:>10,} parameters, {m['steps']:>6} steps, "
              f"held-out {100 * acc['accuracy']:.1f}% ({per})")  # fmt: skip
    agreement = manifest["agreement"]
    print(f"  agree on {100 * agreement['share']:.1f}% of held-out items, "
          f"right {100 * agreement['accuracy_when_agree']:.1f}% of those")  # fmt: skip
    for gate in manifest["gates"]:
        print(f"  [{'pass' if gate['passed'] else 'FAIL'}] {gate['name']}: {gate['detail']}")
    if problems:
        print("files: " + "; ".join(problems))
        return 1
    print(f"files: {len(manifest['checksums'])} files match their checksums")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from mai_graph.cli.train import train_from_args

    return train_from_args(args)


def register(sub: Any) -> None:
    """Add ``pair`` and ``train-pair`` to ``mai-graph``'s subparsers."""
    from mai_graph.cli.train import add_arguments

    pair = sub.add_parser(
        "pair", help="the trained tiny pair shipped with mai-graph: where, what, files intact"
    )
    pair.add_argument("--dir", help="a trained pair's folder (default: a shipped pair)")
    pair.add_argument(
        "--pair", choices=list(PAIRS), default=None,
        help=f"which shipped pair (default: {DEFAULT_PAIR})",
    )  # fmt: skip
    pair.add_argument("--path", action="store_true", help="print only the folder")
    pair.set_defaults(func=_cmd_pair)
    train = sub.add_parser(
        "train-pair",
        help="train the tiny demo pair on the synthetic task (CPU, minutes)",
        epilog=_TRAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(train)
    train.set_defaults(func=_cmd_train)
