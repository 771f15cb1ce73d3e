"""MMBench's CircularEval: a multiple-choice question counts only if it is right in every rotation.

A question with ``n`` options is asked ``n`` times, the option texts rotated over the same
letters each time, so an answer that leans on a letter (always "A") or on a position cannot
pass. The benchmark reports the share of questions answered right in all their rotations; the
per-rotation accuracy is reported next to it (:func:`~mai_graph.eval.scorers.kind_metrics`).
"""

from __future__ import annotations

from collections.abc import Iterable

from mai_graph.eval.datasets import Sample

__all__ = ["GROUP_KEY", "SHIFT_KEY", "circular_variants"]

GROUP_KEY = "circular_group"
"""``meta`` key of a rotation: the id of the question it was made from."""

SHIFT_KEY = "circular_shift"
"""``meta`` key of a rotation: by how many options the texts were rotated (0: as given)."""


def _rotated(sample: Sample, shift: int) -> Sample:
    assert sample.options is not None
    letters = list(sample.options)
    texts = [sample.options[letter] for letter in letters]
    n = len(letters)
    options = {letters[i]: texts[(i + shift) % n] for i in range(n)}
    answer = letters[(letters.index(sample.answer.strip().upper()) - shift) % n]
    meta = {**sample.meta, GROUP_KEY: sample.id, SHIFT_KEY: shift}
    suffix = f"@{shift}" if shift else ""
    return sample.model_copy(
        update={"id": f"{sample.id}{suffix}", "options": options, "answer": answer, "meta": meta}
    )


def circular_variants(samples: Iterable[Sample]) -> list[Sample]:
    """Every multiple-choice sample in all its rotations; other samples as they are.

    The rotation by 0 keeps the sample's id; rotation ``k`` gets the id ``"{id}@{k}"``. Each
    rotation's ``meta`` names its question (:data:`GROUP_KEY`) and shift (:data:`SHIFT_KEY`).

    >>> s = Sample(id="q", question="Which?", kind="choice", answer="B",
    ...            options={"A": "cat", "B": "dog", "C": "fox"})
    >>> [(v.id, v.answer, v.options[v.answer]) for v in circular_variants([s])]
    [('q', 'B', 'dog'), ('q@1', 'A', 'dog'), ('q@2', 'C', 'dog')]
    """
    out: list[Sample] = []
    for sample in samples:
        if sample.kind != "choice" or not sample.options or len(sample.options) < 2:
            out.append(sample)
            continue
        out += [_rotated(sample, shift) for shift in range(len(sample.options))]
    return out
