"""Read a trained pair's reasonings back against the pictures they describe (arrow tasks).

    python benchmarks/read_back.py --pair v4 --task v4 [--n 60] [--seed 2000]
        [--backend transformers] [--results docs/results/readback-v4.json]

Each model answers short (``small``, ``large``) and writes its reasoning (``small_cot`` and
``large_cot``) for ``--n`` held-out items of an arrow task (``v3`` or ``v4``), drawn with
``--seed``; the generator's scene of each item says what the picture holds. Every reasoning is
then read clause by clause:

- the listing (``I see r1c2 red right, ...``): arrows listed with the right colour and way,
  listed wrong, missed, or listed where the picture has none;
- the start of a walk: the arrow the question names (v3: by its colour; v4: by its cell);
- each step (``Next r2c3 blue down.``): the cell is where the previous clause's arrow points;
  and each clause of the walk, the start's included, writes the picture's colour and way;
- a choice's conclusion (``So r3c1 points up. Answer: B``): the way read is the picture's, and
  the letter is that of the option the reasoning named;
- the final answer, scored as the evaluation scores it; for walk questions, by the number of
  arrows followed, for the short answers too (a one-pass answer that stays right as the walk
  grows is not taking the steps one after another).

This is what the v3 pair's failures were read from (docs/tiny-pair.md): what a model can read
off the picture, and which step of the chain it gets wrong.
"""

import argparse
import asyncio
import collections
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.deploy.select import backends_for
from mai_graph.eval import load_dataset, make_synthetic
from mai_graph.eval.runner import arun_eval
from mai_graph.eval.scorers import score
from mai_graph.eval.synthetic import DIRECTIONS, cell_name, target_cell
from mai_graph.pair import trained_pair_paths
from mai_graph.pair.task import heldout_items, reasoning_text
from mai_graph.results import RESULTS_HELP, command_line, recording

_ARROW = re.compile(r"(r[1-4]c[1-4]) (\w+) (\w+)")
_STEP = re.compile(r"(Start|Next) (r[1-4]c[1-4]) (\w+)(?: (\w+))?\.")
_POINTS = re.compile(r"So (\w+) points (\w+)\. Answer: (\w)")
_NAMES = {cell_name(c): c for c in range(16)}


def walk_of(item: Any) -> list[tuple[str, ...]]:
    """The clauses of the right walk for ``item`` (the task's own reasoning; none: no walk)."""
    return list(_STEP.findall(reasoning_text(item)))


def read_one(item: Any, text: str) -> collections.Counter[str]:
    """Counts of right and wrong clauses of one reasoning about ``item``."""
    c: collections.Counter[str] = collections.Counter()
    truth = {cell_name(cell): (colour, way) for way, colour, cell in item.scene}
    if text.startswith("I see "):  # a listing (v4's reach reasonings have none)
        listed = {cell: (col, way) for cell, col, way in _ARROW.findall(text.split(". ")[0])}
        for cell, seen in listed.items():
            c["listed right" if truth.get(cell) == seen else "listed wrong"] += 1
        c["missed"] += len(set(truth) - set(listed))
        c["arrows"] += len(truth)
    steps = _STEP.findall(text)
    right_walk = walk_of(item)
    if steps and right_walk:
        c["walks"] += 1
        c["started right"] += steps[0][1] == right_walk[0][1]
        for _, cell, colour, way in steps:  # the start's clause and each step's
            seen = truth.get(cell)
            c["walk clauses"] += 1
            c["walk clauses that read the picture right"] += bool(
                seen and seen[0] == colour and (not way or seen[1] == way)
            )
        for (_, prev, _, prev_way), (_, cell, _, _) in zip(steps, steps[1:]):
            c["steps"] += 1
            moved = prev_way in DIRECTIONS
            follows = moved and target_cell(_NAMES[prev], prev_way) == _NAMES[cell]
            c["steps that follow the previous one"] += follows
    row = item.row
    so = _POINTS.search(text)
    if so and row.get("options"):  # a choice: the way read, then its option's letter
        subject, way, letter = so.groups()
        if subject in truth:  # v4: "So r3c1 points up": the option is the cell
            read, option = truth[subject][1], subject
        else:  # v3: "So red points left": the option is the way
            read = next((w for col, w in truth.values() if col == subject), "")
            option = way
        c["choices"] += 1
        c["ways read right"] += read == way
        c["letters that follow the reasoning"] += row["options"].get(letter) == option
    answer = text.rsplit("Answer:", 1)[-1].strip() if "Answer:" in text else ""
    c["right"] += score(answer, row["answer"], row["kind"], row.get("options")).correct
    c["reasonings"] += 1
    return c


POLICIES = ("small", "large", "small_cot", "large_cot")


def hops_of(item: Any) -> int | None:
    """How many arrows a walk question follows (None: not a walk)."""
    walk = walk_of(item)
    return len(walk) - 1 if walk else None


def share(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}% ({n}/{d})" if d else "-"


async def write_reasonings(args: argparse.Namespace, work: Path) -> Path:
    data = make_synthetic(work / "data", n=args.n, seed=args.seed, task=args.task)
    samples = load_dataset(data).samples
    small, large = trained_pair_paths(args.pair)
    pair = backends_for(args.backend, str(small), str(large))
    await start_backends(*pair)
    try:
        await arun_eval(samples, *pair, out_dir=work / "runs", policies=POLICIES,
                        concurrency=args.concurrency, progress=False, data=str(data))  # fmt: skip
    finally:
        shutdown_backends(*pair)
    return work / "runs" / "records.jsonl"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="v4", help="a shipped pair's name or a pair folder")
    ap.add_argument("--task", default="v4", choices=["v3", "v4"])
    ap.add_argument("--n", type=int, default=60, help="held-out items")
    ap.add_argument("--seed", type=int, default=2000, help="seed of the held-out items")
    ap.add_argument("--backend", default="transformers", choices=["transformers", "vllm"])
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = ap.parse_args()
    command = command_line(["python", "benchmarks/read_back.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        items = heldout_items(args.n, seed=args.seed, task=args.task)
        with tempfile.TemporaryDirectory() as tmp:
            records = asyncio.run(write_reasonings(args, Path(tmp)))
            counts: dict[str, collections.Counter[str]] = {}
            by_hops: dict[str, dict[int, list[bool]]] = {p: {} for p in POLICIES}
            for line in records.read_text(encoding="utf-8").splitlines():
                r = json.loads(line)
                if r.get("type") == "sample":  # a run's final answer: right by hops
                    item = items[int(r["sample"].rsplit("-", 1)[1])]
                    hops, row = hops_of(item), item.row
                    if hops is not None:
                        ok = score(r.get("answer") or "", row["answer"], row["kind"],
                                   row.get("options")).correct  # fmt: skip
                        by_hops[r["policy"]].setdefault(hops, []).append(ok)
                    continue
                if r.get("type") != "call" or r.get("stage") == "answer":
                    continue
                if r.get("node") not in ("reason", "baseline") or "Answer" not in r["text"]:
                    continue
                index = int(r["sample"].rsplit("-", 1)[1])
                by = counts.setdefault(r["policy"], collections.Counter())
                by.update(read_one(items[index], r["text"]))
        print(f"reasonings of pair {args.pair} on {args.n} held-out {args.task} items "
              f"(seed {args.seed}), {args.backend}, read back against the pictures:")  # fmt: skip
        for policy in ("small_cot", "large_cot"):
            c = counts.get(policy, collections.Counter())
            print(f"  {policy}: answer right {share(c['right'], c['reasonings'])}")
            print(f"    arrows listed right {share(c['listed right'], c['arrows'])}, "
                  f"wrong {c['listed wrong']}, missed {c['missed']}")  # fmt: skip
            print(f"    walks started at the named arrow "
                  f"{share(c['started right'], c['walks'])}")  # fmt: skip
            print(
                f"    steps that follow the previous one "
                f"{share(c['steps that follow the previous one'], c['steps'])}; "
                f"clauses of the walk that read the picture right "
                f"{share(c['walk clauses that read the picture right'], c['walk clauses'])}"
            )
            print(f"    choices: the way read right {share(c['ways read right'], c['choices'])}, "
                  f"the letter that of the option the reasoning named "
                  f"{share(c['letters that follow the reasoning'], c['choices'])}")  # fmt: skip
            rec.data[policy] = dict(c)
        print("  walk questions answered right, by arrows followed (one pass: small, large):")
        for policy in POLICIES:
            cells = [f"{k}: {share(sum(v), len(v))}" for k, v in sorted(by_hops[policy].items())]
            print(f"    {policy:<9} " + ", ".join(cells))
            rec.data.setdefault("by_hops", {})[policy] = {
                str(k): [sum(v), len(v)] for k, v in sorted(by_hops[policy].items())
            }
        rec.data.update(pair=args.pair, task=args.task, n=args.n, seed=args.seed,
                        backend=args.backend)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
