"""Offline calibration: replay recorded branches under many gate settings and pick one.

Records made with every branch (``mai-graph eval --branches``) hold, for each sample, both
short answers with their probabilities, the reasoning, the S2 answer and the transfer answer
at each recorded keep ratio. Any gate setting is then replayed without a model call
(:class:`~mai_graph.eval.replay.Branches`). :func:`calibrate` splits the samples into a
calibration and a held-out part (by a hash of the sample id), scores a grid of settings on
the calibration part, picks the cheapest setting whose accuracy meets the target (or the most
accurate one within a transfer budget) and reports how it holds on the held-out part.

A setting qualifies by a one-sided Wilson bound at ``confidence`` rather than by its point
estimate, so a setting that only just meets the target by chance is not chosen.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.eval.datasets import GROUP_KEY
from mai_graph.eval.records import CallRecord, RecordSet, SampleRun
from mai_graph.eval.replay import Branches, path_latency
from mai_graph.gate import agreement_exits, pooled_probability

__all__ = [
    "CalibrationResult",
    "Setting",
    "SettingScore",
    "calibrate",
    "context_file",
    "pareto_front",
    "score_setting",
    "score_settings",
    "settings_grid",
    "split_samples",
    "wilson_bounds",
]

_GRID_PROBS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class Setting:
    """The replayable settings: the gate, the S2 exit and the keep ratio."""

    gate: str = "agree"
    gate_min_prob: float = 0.5
    s2_exit: bool = True
    large_confident_exit: float | None = None
    keep_ratio: float = 0.2
    pooled_exit: float | None = None

    def fields(self) -> dict[str, Any]:
        """The setting as :class:`~mai_graph.context.MAIContext` fields."""
        return asdict(self)

    def label(self) -> str:
        """A short readable name.

        >>> Setting("agree_confident", 0.8, False, 0.95, 0.2).label()
        'agree_confident>=0.8, s2 off, large>=0.95, keep 0.2'
        >>> Setting("agree_joint", 0.64, True, None, 0.2, pooled_exit=0.7).label()
        'agree_joint>=0.64, s2 on, pooled>=0.7, keep 0.2'
        """
        gate = (
            f"{self.gate}>={self.gate_min_prob:g}"
            if self.gate in ("agree_confident", "agree_joint")
            else (self.gate)
        )
        parts = [gate, f"s2 {'on' if self.s2_exit else 'off'}"]
        if self.large_confident_exit is not None:
            parts.append(f"large>={self.large_confident_exit:g}")
        if self.pooled_exit is not None:
            parts.append(f"pooled>={self.pooled_exit:g}")
        parts.append(f"keep {self.keep_ratio:g}")
        return ", ".join(parts)


@dataclass(frozen=True)
class SettingScore:
    """A setting replayed over some samples."""

    setting: Setting
    n: int
    accuracy: float
    transfer_share: float
    """Share of runs that needed the large model's transfer step."""
    large_share: float
    """Share of runs in which the large model did more than its short answer."""
    mean_latency_s: float
    routes: dict[str, float]
    right: float
    """Sum of the runs' credits (the count of right answers, unless VQA accuracies)."""
    transfers: int
    gap_recovered: float | None = None
    """(accuracy - weak) / (strong - weak), when both reference accuracies are known."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        out = asdict(self)
        out["setting"] = self.setting.fields()
        out["label"] = self.setting.label()
        return out


@dataclass
class CalibrationResult:
    """What :func:`calibrate` found."""

    objective: dict[str, Any]
    """``{"target_accuracy": x}`` or ``{"max_transfer_share": y}``, and the confidence."""
    met: bool
    """A setting met the objective on the calibration split."""
    chosen: SettingScore | None
    """The chosen setting on the calibration split (None when nothing qualified)."""
    held_out: SettingScore | None
    held_out_met: bool | None
    """The chosen setting meets the objective on the held-out split too (point estimate)."""
    calibration_ids: list[str]
    held_out_ids: list[str]
    curve: list[SettingScore] = field(default_factory=list)
    """Every setting on the calibration split."""
    references: dict[str, Any] = field(default_factory=dict)
    """Weak / strong policy accuracies used for the gap recovered, per split."""
    base_context: dict[str, Any] = field(default_factory=dict)
    rules: list[dict[str, Any]] = field(default_factory=list)
    """Each gate rule's cheapest setting at plain agreement's accuracy (see
    :func:`compare_rules`)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "rules": self.rules,
            "objective": self.objective,
            "met": self.met,
            "chosen": self.chosen.to_dict() if self.chosen else None,
            "held_out": self.held_out.to_dict() if self.held_out else None,
            "held_out_met": self.held_out_met,
            "split": {
                "calibration": len(self.calibration_ids),
                "held_out": len(self.held_out_ids),
            },
            "references": self.references,
            "curve": [s.to_dict() for s in self.curve],
            "pareto": [s.setting.label() for s in pareto_front(self.curve)],
        }


def wilson_bounds(right: float, n: int, confidence: float) -> tuple[float, float]:
    """One-sided Wilson bounds of a proportion at ``confidence`` (0 gives the estimate).

    ``right`` may be a sum of partial credits (VQA accuracy); it is treated as a count.

    >>> lo, hi = wilson_bounds(90, 100, 0.9)
    >>> round(lo, 3), round(hi, 3)
    (0.855, 0.932)
    """
    if n == 0:
        return 0.0, 1.0
    p = right / n
    if confidence <= 0:
        return p, p
    z = NormalDist().inv_cdf(confidence)
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def split_samples(
    ids: Iterable[str], share: float, seed: int = 0, groups: Mapping[str, str] | None = None
) -> tuple[list[str], list[str]]:
    """Split sample ids into (calibration, held-out) by a hash of ``seed`` and the id.

    ``groups`` maps ids that must stay on one side together (the rotations of a question) to
    a shared key, which is hashed instead.

    >>> cal, held = split_samples([str(i) for i in range(1000)], 0.5)
    >>> 450 < len(cal) < 550 and not set(cal) & set(held)
    True
    >>> cal, held = split_samples(["q", "q@1", "r", "r@1"], 0.5, groups={"q@1": "q", "r@1": "r"})
    >>> sorted(cal + held) == ["q", "q@1", "r", "r@1"] and ("q" in cal) == ("q@1" in cal)
    True
    """
    if not 0 < share < 1:
        raise ConfigError(
            f"calibration share must be in (0, 1), got {share!r}",
            parameter="calibration_share",
            value=share,
        )
    cal: list[str] = []
    held: list[str] = []
    for sample_id in ids:
        key = (groups or {}).get(sample_id, sample_id)
        digest = hashlib.sha256(f"{seed}|{key}".encode()).digest()
        (cal if int.from_bytes(digest[:8], "big") / 2**64 < share else held).append(sample_id)
    return cal, held


def _thresholds(values: Sequence[float]) -> list[float]:
    """Probability thresholds: fixed points plus the deciles of the recorded values."""
    points = set(_GRID_PROBS)
    ordered = sorted(values)
    if ordered:
        for i in range(1, 10):
            points.add(round(ordered[min(len(ordered) - 1, i * len(ordered) // 10)], 3))
    return sorted(p for p in points if 0 < p <= 1)


def settings_grid(branches: Sequence[Branches]) -> list[Setting]:
    """Every setting the branches can replay.

    Gates ``agree``, ``agree_confident`` and ``agree_joint`` at several probability thresholds
    and ``never``; S2 exit on and off; on disagreement nothing, ``large_confident_exit`` or
    (where the verification calls recorded distributions) ``pooled_exit``, each at several
    thresholds; each keep ratio recorded for every sample.
    """
    if not branches:
        return []
    ratios = set.intersection(*(set(b.answers) for b in branches))
    keep = sorted(r for r in ratios if r is not None)
    both = [
        min(b.small.answer_prob, b.large.answer_prob)
        for b in branches
        if b.small.answer_prob is not None and b.large.answer_prob is not None
    ]
    joint = [
        b.small.answer_prob * b.large.answer_prob
        for b in branches
        if b.small.answer_prob is not None and b.large.answer_prob is not None
    ]
    large = [b.large.answer_prob for b in branches if b.large.answer_prob is not None]
    pooled = [
        p
        for b in branches
        if (p := pooled_probability(b.small.distribution, b.large.distribution,
                                    b.large.canonical or "")) is not None
    ]  # fmt: skip
    gate_probs = _thresholds(both) if both else []
    joint_probs = _thresholds(joint) if joint else []
    exits: list[tuple[float | None, float | None]] = [(None, None)]
    exits += [(p, None) for p in (_thresholds(large) if large else [])]
    exits += [(None, p) for p in (_thresholds(pooled) if pooled else [])]
    out = []
    for ratio in keep:
        out.append(Setting("never", 0.5, False, None, ratio))
        gates = [("agree", 0.5)] + [("agree_confident", p) for p in gate_probs]
        gates += [("agree_joint", p) for p in joint_probs]
        for gate, min_prob in gates:
            for s2 in (True, False):
                for large_exit, pooled_exit in exits:
                    out.append(Setting(gate, min_prob, s2, large_exit, ratio, pooled_exit))
    return out


class _Scorer:
    """Replay caches shared by all settings.

    Final answers are scored once per (sample, call); the gate's agreement rule is memoized
    (it reads only the answers, their probabilities and the context's ``gate``,
    ``gate_min_prob`` and ``rel_tol``).
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], float] = {}
        self._exits: dict[tuple[Any, ...], bool] = {}
        self._outcomes: dict[tuple[int, str, int], tuple[float, bool, float]] = {}

    def exits(
        self, a: str, b: str, prob_a: float | None, prob_b: float | None, ctx: MAIContext
    ) -> bool:
        key = (a, b, prob_a, prob_b, ctx.gate, ctx.gate_min_prob, ctx.rel_tol)
        hit = self._exits.get(key)
        if hit is None:
            hit = self._exits[key] = agreement_exits(a, b, prob_a, prob_b, ctx)
        return hit

    def outcome(
        self, branches: Branches, route: str, path: Sequence[CallRecord], final: CallRecord
    ) -> tuple[float, bool, float]:
        """A replayed run's credit, large-model use beyond the short answer, and seconds.

        One per run, route and final call, whatever the setting (the seconds are the
        critical path's).
        """
        key = (id(branches), route, id(final))
        hit = self._outcomes.get(key)
        if hit is None:
            beyond = any(c.role == "large" and c.node != "verify" for c in path)
            hit = (self.credit(branches.run, final), beyond, path_latency(path))
            self._outcomes[key] = hit
        return hit

    def credit(self, run: SampleRun, final: CallRecord) -> float:
        key = (run.record.sample, id(final))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = run.record.verdict(final.text or "").credit
        return hit


def score_setting(
    branches: Sequence[Branches],
    setting: Setting,
    base: MAIContext | None = None,
    *,
    references: tuple[float, float] | None = None,
    _scorer: _Scorer | None = None,
) -> SettingScore:
    """Replay one setting over recorded branches.

    Args:
        branches: The runs (see :meth:`Branches.of`).
        setting: The setting to replay.
        base: The recorded runs' context (the setting's fields replace its own).
        references: ``(weak, strong)`` accuracies for the gap recovered.
    """
    ctx = (base or MAIContext()).replace(policy="mai", **setting.fields())
    scorer = _scorer or _Scorer()
    transfers = large = 0
    right = latency = 0.0
    routes: dict[str, int] = {}
    for b in branches:
        route, path, final = b.decide(ctx, scorer.exits)
        routes[route] = routes.get(route, 0) + 1
        credit, beyond, seconds = scorer.outcome(b, route, path, final)
        right += credit
        transfers += route == "transfer"
        large += beyond
        latency += seconds
    n = len(branches)
    accuracy = right / n if n else 0.0
    gap = None
    if references is not None and abs(references[1] - references[0]) > 1e-12:
        gap = (accuracy - references[0]) / (references[1] - references[0])
    return SettingScore(
        setting=setting,
        n=n,
        accuracy=accuracy,
        transfer_share=transfers / n if n else 0.0,
        large_share=large / n if n else 0.0,
        mean_latency_s=latency / n if n else 0.0,
        routes={k: v / n for k, v in sorted(routes.items())},
        right=right,
        transfers=transfers,
        gap_recovered=gap,
    )


def score_settings(
    branches: Sequence[Branches],
    settings: Iterable[Setting],
    base: MAIContext | None = None,
    *,
    references: tuple[float, float] | None = None,
) -> list[SettingScore]:
    """:func:`score_setting` for many settings, sharing the replay caches."""
    scorer = _Scorer()
    return [
        score_setting(branches, s, base, references=references, _scorer=scorer) for s in settings
    ]


def pareto_front(scores: Sequence[SettingScore]) -> list[SettingScore]:
    """Settings no other setting beats on both accuracy and transfer share, by share."""
    front: list[SettingScore] = []
    best = -1.0
    for s in sorted(scores, key=lambda s: (s.transfer_share, -s.accuracy, s.mean_latency_s)):
        if s.accuracy > best + 1e-12:
            front.append(s)
            best = s.accuracy
    return front


RULES = {
    "agree": "plain agreement (the paper's rule)",
    "agree_confident": "agreement, both probabilities >= t (the smaller one)",
    "agree_joint": "agreement, the product of the probabilities >= t",
    "large_confident": "+ on disagreement, the large model's probability >= t",
    "pooled": "+ on disagreement, the averaged distributions' mass on its answer >= t",
}
"""The gate rules :func:`compare_rules` puts side by side."""


def _rule(setting: Setting) -> str:
    if setting.pooled_exit is not None:
        return "pooled"
    if setting.large_confident_exit is not None:
        return "large_confident"
    return setting.gate


def _early_exit(score: SettingScore) -> float:
    return score.routes.get("agree", 0.0) + score.routes.get("large_confident", 0.0)


def compare_rules(
    curve: Sequence[SettingScore],
    held: Sequence[Branches],
    base: MAIContext,
    scorer: Any = None,
) -> list[dict[str, Any]]:
    """Each gate rule against plain agreement at equal accuracy, on both splits.

    Plain agreement is ``agree`` with the S2 exit at the base keep ratio; for every rule, its
    setting (at that keep ratio and S2 exit) with the lowest mean latency among those at least
    as accurate as plain agreement on the calibration split, and how it does on the held-out
    one: accuracy, early-exit share (runs ended at verification: ``agree`` and
    ``large_confident``) and mean latency.
    """
    ratio = base.keep_ratio
    same = [s for s in curve if s.setting.keep_ratio == ratio and s.setting.s2_exit]
    plain = next((s for s in same if s.setting == Setting("agree", 0.5, True, None, ratio)), None)
    if plain is None:
        return []
    out = []
    for rule, meaning in RULES.items():
        family = [s for s in same if _rule(s.setting) == rule and s.accuracy >= plain.accuracy]
        if not family:
            out.append({"rule": rule, "meaning": meaning, "setting": None})
            continue
        best = min(family, key=lambda s: (s.mean_latency_s, -s.accuracy))
        on_held = score_setting(held, best.setting, base, _scorer=scorer)
        row: dict[str, Any] = {"rule": rule, "meaning": meaning, "setting": best.setting.label()}
        for split, score in (("calibration", best), ("held_out", on_held)):
            row[split] = {
                "accuracy": score.accuracy,
                "early_exit_share": _early_exit(score),
                "mean_latency_s": score.mean_latency_s,
                "n": score.n,
            }
        out.append(row)
    return out


def _reference(records: RecordSet, ids: Sequence[str], policy: str) -> float | None:
    runs = [records.runs.get((policy, i)) for i in ids]
    done = [r for r in runs if r is not None]
    if not done or len(done) < len(ids):
        return None
    right = sum(r.record.verdict(r.record.answer).credit for r in done)
    return right / len(done)


def calibrate(
    records: RecordSet,
    *,
    target_accuracy: float | None = None,
    max_transfer_share: float | None = None,
    calibration_share: float = 0.5,
    confidence: float = 0.9,
    seed: int = 0,
    weak: str = "small",
    strong: str = "large_cot",
) -> CalibrationResult:
    """Pick gate settings from recorded branches for an accuracy target or a transfer budget.

    Args:
        records: Records with ``mai`` runs made with every branch.
        target_accuracy: Pick the setting with the lowest mean latency whose accuracy's lower
            bound on the calibration split is at least this.
        max_transfer_share: Or: pick the most accurate setting whose transfer share's upper
            bound is at most this.
        calibration_share: Share of samples in the calibration split (the rest is held out).
        confidence: One-sided confidence of the Wilson bounds (0: point estimates).
        seed: Seed of the split.
        weak: Reference policy for the gap recovered (its accuracy is 0% of the gap).
        strong: Reference policy for 100% of the gap.

    Returns:
        A :class:`CalibrationResult`.

    Raises:
        ConfigError: Neither or both objectives, values out of range, or no ``mai`` runs
            with every branch in the records.
    """
    if (target_accuracy is None) == (max_transfer_share is None):
        raise ConfigError(
            "give exactly one of target_accuracy and max_transfer_share",
            parameter="target_accuracy",
            fix="e.g. --target-accuracy 0.8 or --max-transfer-share 0.3",
        )
    goals = {"target_accuracy": target_accuracy, "max_transfer_share": max_transfer_share}
    for name, value in goals.items():
        if value is not None and not 0 <= value <= 1:
            raise ConfigError(f"{name} must be in [0, 1], got {value!r}", parameter=name)
    if not 0 <= confidence < 1:
        raise ConfigError(
            f"confidence must be in [0, 1), got {confidence!r}", parameter="confidence"
        )
    runs = [r for r in records.of("mai") if r.record.branches]
    if not runs:
        raise ConfigError(
            f"{records.path} has no mai runs recorded with every branch",
            parameter="records",
            value=str(records.path),
            fix="record them with: mai-graph eval --branches ...",
        )
    base = _base_context(records)
    table = {r.record.sample: Branches.of(r) for r in runs}
    groups = {i: str(b.run.record.meta[GROUP_KEY]) for i, b in table.items()
              if GROUP_KEY in b.run.record.meta}  # fmt: skip
    cal_ids, held_ids = split_samples(sorted(table), calibration_share, seed, groups)
    if not cal_ids or not held_ids:
        raise ConfigError(
            f"{len(table)} samples are too few to split", parameter="records", fix="record more"
        )
    cal = [table[i] for i in cal_ids]
    held = [table[i] for i in held_ids]
    refs: dict[str, Any] = {"weak": weak, "strong": strong}
    pairs: dict[str, tuple[float, float] | None] = {}
    for name, ids in (("calibration", cal_ids), ("held_out", held_ids)):
        w, s = _reference(records, ids, weak), _reference(records, ids, strong)
        refs[name] = {weak: w, strong: s}
        pairs[name] = (w, s) if w is not None and s is not None else None
    scorer = _Scorer()
    grid = settings_grid(cal)
    curve = [
        score_setting(cal, s, base, references=pairs["calibration"], _scorer=scorer) for s in grid
    ]
    objective: dict[str, Any] = {"confidence": confidence}
    if target_accuracy is not None:
        objective["target_accuracy"] = target_accuracy
        ok = [s for s in curve if wilson_bounds(s.right, s.n, confidence)[0] >= target_accuracy]
        ok.sort(key=lambda s: (s.mean_latency_s, s.transfer_share, -s.accuracy))
    else:
        assert max_transfer_share is not None
        objective["max_transfer_share"] = max_transfer_share
        ok = [
            s for s in curve if wilson_bounds(s.transfers, s.n, confidence)[1] <= max_transfer_share
        ]
        ok.sort(key=lambda s: (-s.accuracy, s.mean_latency_s))
    chosen = ok[0] if ok else None
    held_score = held_met = None
    if chosen is not None:
        held_score = score_setting(
            held, chosen.setting, base, references=pairs["held_out"], _scorer=scorer
        )
        if target_accuracy is not None:
            held_met = held_score.accuracy >= target_accuracy
        else:
            held_met = held_score.transfer_share <= max_transfer_share  # type: ignore[operator]
    rules = compare_rules(curve, held, base.replace(policy="mai"), scorer)
    return CalibrationResult(
        rules=rules,
        objective=objective,
        met=chosen is not None,
        chosen=chosen,
        held_out=held_score,
        held_out_met=held_met,
        calibration_ids=cal_ids,
        held_out_ids=held_ids,
        curve=curve,
        references=refs,
        base_context=base.model_dump(),
    )


def _base_context(records: RecordSet) -> MAIContext:
    if not records.sessions:
        return MAIContext()
    fields = dict(records.sessions[0].context)
    known = set(MAIContext.model_fields)
    return MAIContext(**{k: v for k, v in fields.items() if k in known})


def context_file(result: CalibrationResult) -> dict[str, Any]:
    """The chosen settings as a context file: a JSON object of MAIContext fields.

    The recorded runs' own settings (reasoning budget, sparsification, ...) are kept where
    they differ from the defaults, since the calibration holds for them; ``policy`` and
    ``answer_kind`` are left to each run.
    """
    if result.chosen is None:
        raise ConfigError("no setting was chosen", parameter="calibration")
    defaults = MAIContext().model_dump()
    out = {
        k: v
        for k, v in result.base_context.items()
        if k not in ("policy", "answer_kind") and k in defaults and v != defaults[k]
    }
    out.update(result.chosen.setting.fields())
    if out.get("gate") not in ("agree_confident", "agree_joint"):
        out.pop("gate_min_prob", None)
    for key in ("large_confident_exit", "pooled_exit"):
        if out.get(key) is None:
            out.pop(key, None)
    MAIContext(**out)  # the file must load
    return out
