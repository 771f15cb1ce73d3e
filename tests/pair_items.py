"""Held-out items of a trained pair, asked through the graph and scored (the pair tests)."""

from pathlib import Path
from typing import Any

from mai_graph import MAIContext, arun
from mai_graph.eval.scorers import score
from mai_graph.pair import read_manifest
from mai_graph.pair.task import heldout_items


def held_out(folder: Path, pair: Path, n: int, task: str = "v1") -> list[tuple[Any, str]]:
    """The first ``n`` items of the pair's held-out set (its manifest's seed), pictures saved."""
    seed = read_manifest(pair)["heldout"]["seed"]
    out = []
    for i, item in enumerate(heldout_items(n, seed=seed, task=task)):
        path = folder / f"{i}.png"
        item.image.save(path)
        out.append((item, str(path)))
    return out


def right(answer: str, item: Any) -> bool:
    """Whether ``answer`` is right for ``item``, as the evaluation scores it."""
    row = item.row
    return score(answer, row["answer"], row["kind"], row.get("options")).correct


async def ask(item: Any, path: str, small: Any, large: Any, **settings: Any) -> Any:
    """``item`` asked through ``arun`` in its own answer kind, with ``settings``."""
    row = item.row
    ctx = MAIContext(answer_kind=row["kind"], **settings)
    return await arun(
        row["question"], path, options=row.get("options"), small=small, large=large, context=ctx
    )
