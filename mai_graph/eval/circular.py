"""MMBench's CircularEval: a multiple-choice question counts only if it is right in every rotation.

A question with ``n`` options is asked ``n`` times, the option texts rotated over the same
letters each time, so an answer that leans on a letter (always "A") or on a position cannot
pass. The benchmark reports the share of questions answered right in all their rotations; the
per-rotation accuracy is reported next to it (:func:`~mai_graph.eval.scorers.kind_metrics`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from mai_graph.answers import canonical_gold
from mai_graph.errors import ConfigError
from mai_graph.eval.datasets import GROUP_KEY, ROTATIONS_KEY, SHIFT_KEY, Sample

__all__ = ["GROUP_KEY", "ROTATIONS_KEY", "SHIFT_KEY", "circular_variants"]


def _rotated(sample: Sample, shift: int) -> Sample:
    assert sample.options is not None
    letters = list(sample.options)
    texts = [sample.options[letter] for letter in letters]
    n = len(letters)
    options = {letters[i]: texts[(i + shift) % n] for i in range(n)}
    gold = canonical_gold(sample.answer, "choice", sample.options)  # "(B)", "B." or the text
    answer = letters[(letters.index(gold) - shift) % n]
    meta = {**sample.meta, GROUP_KEY: sample.id, SHIFT_KEY: shift, ROTATIONS_KEY: n}
    suffix = f"@{shift}" if shift else ""
    return sample.model_copy(
        update={"id": f"{sample.id}{suffix}", "options": options, "answer": answer, "meta": meta}
    )


def circular_variants(samples: Iterable[Sample]) -> list[Sample]:
    """Every multiple-choice sample in all its rotations; other samples as they are.

    The rotation by 0 keeps the sample's id; rotation ``k`` gets the id ``"{id}@{k}"``. Each
    rotation's ``meta`` names its question (:data:`GROUP_KEY`), which rotation it is
    (:data:`SHIFT_KEY`) and how many there are (:data:`ROTATIONS_KEY`); the digest includes
    them, so records of the plain question and of its rotations never mix. Samples that are
    rotations already (an MMBench file with its own) are kept as they are.

    >>> s = Sample(id="q", question="Which?", kind="choice", answer="B",
    ...            options={"A": "cat", "B": "dog", "C": "fox"})
    >>> [(v.id, v.answer, v.options[v.answer]) for v in circular_variants([s])]
    [('q', 'B', 'dog'), ('q@1', 'A', 'dog'), ('q@2', 'C', 'dog')]
    """
    samples = list(samples)
    repeated = [s.id for s in samples if _rotatable(s) and _repeats_a_text(s)]
    if repeated:
        raise ConfigError(
            f"{len(repeated)} multiple-choice question(s) repeat an option text (e.g. "
            f"{repeated[0]!r}): their rotations cannot be told apart, so no model could pass "
            "them in every rotation",
            parameter="data",
            value=repeated[:10],
            fix="make the option texts of these questions distinct, or drop the questions",
        )
    out: list[Sample] = []
    for sample in samples:
        if not _rotatable(sample):
            out.append(sample)
            continue
        assert sample.options is not None
        out += [_rotated(sample, shift) for shift in range(len(sample.options))]
    clash = sorted(i for i, n in Counter(s.id for s in out).items() if n > 1)
    if clash:
        raise ConfigError(
            f"rotation ids clash with sample ids: {clash[:5]} (rotation k of question ID is "
            "named ID@k)",
            parameter="data",
            value=clash[:10],
            fix="rename the samples whose ids end in @ and a number",
        )
    return out


def _repeats_a_text(sample: Sample) -> bool:
    texts = list((sample.options or {}).values())
    return len(set(texts)) < len(texts)


def _rotatable(sample: Sample) -> bool:
    """A multiple-choice question with two or more options that is not a rotation already."""
    return (
        GROUP_KEY not in sample.meta
        and sample.kind == "choice"
        and sample.options is not None
        and len(sample.options) >= 2
    )
