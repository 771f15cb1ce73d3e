"""Run policies over a dataset, recording every generation; resume where an earlier run stopped.

Each (policy, sample) pair is one run of the MAI graph with ``policy`` and the sample's answer
kind set in the context. Policies run one after the other (so each one's latency is measured
under its own load); within a policy up to ``concurrency`` samples run at once. A finished
run is appended to ``records.jsonl`` at once (see :mod:`mai_graph.eval.records`); on a new
call with the same folder, finished runs are skipped.

A run whose input cannot be used (an image that does not decode, caught while the run reads
it) is a bad row: with ``on_bad_row="skip"`` it is recorded as skipped, with its reason, and
the evaluation goes on (a resume does not redo it while the row is unchanged); with
``"fail"`` the evaluation stops with an :class:`~mai_graph.errors.ImageError` naming the row.

With ``branches=True`` the ``mai`` policy runs with ``gate="never"`` and ``s2_exit=False``, so
every sample records both short answers (with probabilities), the reasoning, the S2 answer and
the transfer answer; reports and calibration then replay any gate setting offline. Extra
``keep_ratios`` record one more transfer answer each, forked from the run's checkpoint after
the S2 turn (reasoning is not redone); ``transfer_variants=("full", "masked")`` records, at
every keep ratio, the transfer answer with the small model's stated final answer left out of
the reasoning too (``MAIContext.transfer_mask_answer``: reading against copying).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_type_hints

from mai_graph import tracing
from mai_graph.answers import extract_answer
from mai_graph.backends.base import VLMBackend
from mai_graph.context import MAIContext, Policy
from mai_graph.errors import ConfigError, ImageAccessError, ImageError, check_int
from mai_graph.eval.datasets import GROUP_KEY, OnBadRow, Sample
from mai_graph.eval.records import (
    RECORDS_FILE,
    CallRecord,
    RecordWriter,
    SampleRecord,
    SampleRun,
    SessionRecord,
    SkippedRecord,
    read_records,
)
from mai_graph.eval.replay import outcome, ratio_key
from mai_graph.files import output_folder
from mai_graph.lineup import Lineup
from mai_graph.loop import run_sync
from mai_graph.state import MAIState

__all__ = [
    "BRANCH_SETTINGS",
    "POLICIES",
    "TRANSFER_VARIANTS",
    "RunSummary",
    "arun_eval",
    "run_eval",
]

POLICIES: tuple[str, ...] = get_args(Policy)
"""Every policy: ``mai`` and the baselines."""

BRANCH_SETTINGS: dict[str, Any] = {"gate": "never", "s2_exit": False, "large_confident_exit": None}
"""Context settings of ``mai`` runs that record every branch."""

TRANSFER_VARIANTS = ("full", "masked")
"""What the large model reads on the transfer route: the sparsified reasoning as it is, or
without its stated final answer (``masked``)."""

# Settings that must not change between the sessions of one records folder.
_COMPARED = ("context", "branches", "keep_ratios", "transfer_variants", "models")

# Text and canonical answer of each call, by (node, role), read from the graph's final state.
_TEXT_KEYS = {
    ("verify", "small"): ("small_answer", "small_canonical"),
    ("verify", "large"): ("large_answer", "large_canonical"),
    ("reason", "small"): ("reasoning", None),
    ("reason", "large"): ("reasoning", None),
    ("extract", "small"): ("s2_answer", "s2_canonical"),
    ("extract", "large"): ("s2_answer", "s2_canonical"),
    ("answer", "large"): ("answer", "canonical"),
}


@dataclass
class RunSummary:
    """What :func:`arun_eval` did."""

    out_dir: Path
    done: int = 0
    """Runs finished in this call."""
    skipped: int = 0
    """Runs found in the records, finished or skipped as bad rows (not redone)."""
    bad_rows: list[str] = field(default_factory=list)
    """Runs skipped as bad rows in this call (``sample 'id' (policy): why``)."""
    problems: list[str] = field(default_factory=list)
    """Lines of the records that were ignored (e.g. a partial line after a crash)."""
    elapsed_s: float = 0.0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mai-graph")
    except PackageNotFoundError:
        return "unknown"


def _check_policies(policies: Sequence[str]) -> list[str]:
    out = list(dict.fromkeys(policies))
    bad = [p for p in out if p not in POLICIES]
    if bad or not out:
        raise ConfigError(
            f"policies must be among {list(POLICIES)}, got {list(policies)}",
            parameter="policies",
            value=list(policies),
            fix="e.g. --policies mai,small,large,small_cot,large_cot",
        )
    return out


def _check_ratios(ratios: Sequence[float], base: float) -> list[float]:
    out: list[float] = [ratio_key(base)]  # type: ignore[list-item]
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0 < r <= 1:
            raise ConfigError(
                f"keep ratios must be in (0, 1], got {r!r}", parameter="keep_ratios", value=r
            )
        key = ratio_key(r)
        if key not in out:
            out.append(key)  # type: ignore[arg-type]
    return out


def _check_variants(variants: Sequence[str], branches: bool) -> list[str]:
    out = list(dict.fromkeys(["full", *variants]))
    bad = [v for v in out if v not in TRANSFER_VARIANTS]
    if bad or isinstance(variants, str):
        raise ConfigError(
            f"transfer variants are {list(TRANSFER_VARIANTS)}, got {variants!r}",
            parameter="transfer_variants",
            value=variants if isinstance(variants, str) else list(variants),
            fix="e.g. --transfer-variants full,masked",
        )
    if len(out) > 1 and not branches:
        raise ConfigError(
            "the masked transfer variant needs branches=True (it is forked from mai runs)",
            parameter="transfer_variants",
            value=out,
            fix="add --branches",
        )
    return out


class _Evaluation:
    """One call of :func:`arun_eval`: the graphs, the writer and the per-run logic."""

    def __init__(
        self,
        lineup: Lineup,
        base: MAIContext,
        branches: bool,
        ratios: list[float],
        writer: RecordWriter,
        variants: Sequence[str] = ("full",),
    ) -> None:
        from mai_graph.graph import create_mai_graph

        self.base = base
        self.branches = branches
        self.ratios = ratios
        self.writer = writer
        # Every (keep ratio, masked) transfer answer recorded besides the run's own.
        self.extra = [
            (r, v == "masked") for r in ratios for v in variants if (r, v) != (ratios[0], "full")
        ]
        builder = create_mai_graph(list(lineup.drafters), *lineup.chain)
        self.graph: Any = builder.compile(name="mai-eval")
        # Every state key (not only the output schema's): texts of each call, probabilities.
        self.keys = [k for k in get_type_hints(MAIState) if k in self.graph.channels]
        self.saver: Any = None
        self.forking: Any = None
        if branches and self.extra:
            from langgraph.checkpoint.memory import InMemorySaver

            self.saver = InMemorySaver()
            self.forking = builder.compile(name="mai-eval", checkpointer=self.saver)

    def context(self, policy: str, sample: Sample) -> MAIContext:
        extra = BRANCH_SETTINGS if policy == "mai" and self.branches else {}
        return self.base.replace(policy=policy, answer_kind=sample.kind, **extra)

    async def run(self, policy: str, sample: Sample) -> float:
        """Run one sample under one policy and append its records; returns its credit."""
        ctx = self.context(policy, sample)
        branches = policy == "mai" and self.branches
        start = time.perf_counter()
        forks: list[tuple[float, bool, dict[str, Any]]] = []
        with tracing.run_span("eval", ctx) as span:
            if branches and self.forking is not None:
                thread = {"configurable": {"thread_id": f"eval-{uuid.uuid4().hex}"}}
                out = await self.forking.ainvoke(
                    sample.graph_input(), thread, context=ctx, output_keys=self.keys
                )
                try:
                    forks = await self._forks(thread, ctx)
                finally:
                    await self.saver.adelete_thread(thread["configurable"]["thread_id"])
            else:
                out = await self.graph.ainvoke(
                    sample.graph_input(), context=ctx, output_keys=self.keys
                )
            tracing.finish_run(span, out)
        wall = time.perf_counter() - start
        calls = self._calls(policy, sample, out, ctx.keep_ratio if branches else None)
        for ratio, masked, fork in forks:
            found = [c for c in self._calls(policy, sample, fork, ratio) if c.node == "answer"]
            calls += [c.model_copy(update={"variant": "masked"}) if masked else c
                      for c in found[-1:]]  # fmt: skip
        record = SampleRecord(
            sample=sample.id,
            policy=policy,
            branches=branches,
            route=out["route"],
            answer=out["answer"],
            canonical=out["canonical"],
            wall_s=wall,
            gold=sample.answer,
            kind=sample.kind,
            options=sample.options,
            references=sample.references,
            digest=sample.digest(),
            meta=sample.meta,
        )
        await asyncio.to_thread(self.writer.write, [*calls, record])
        # The verdict the report will show (a run with every branch is replayed under the
        # base context's gate).
        answer = out["answer"]
        if branches:
            answer = outcome(SampleRun(record, calls), self.base.replace(policy=policy)).answer
        return sample.verdict(answer).credit

    async def _forks(
        self, thread: dict[str, Any], ctx: MAIContext
    ) -> list[tuple[float, bool, dict[str, Any]]]:
        """The extra transfer answers (keep ratios, masked), from the checkpoint before sparsify."""
        assert self.forking is not None
        before = None
        async for snapshot in self.forking.aget_state_history(thread):
            if snapshot.next == ("sparsify",):
                before = snapshot.config
                break
        if before is None:
            return []
        out = []
        for ratio, masked in self.extra:
            fork_ctx = ctx.replace(keep_ratio=ratio, transfer_mask_answer=masked)
            fork = await self.forking.ainvoke(None, before, context=fork_ctx, output_keys=self.keys)
            out.append((ratio, masked, fork))
        return out

    @staticmethod
    def _text(
        m: dict[str, Any], out: dict[str, Any], sample: Sample
    ) -> tuple[str | None, str | None]:
        """A call's own text (recorded at the call) and the canonical answer read off it.

        The final state holds one text per key (the last draft's, the last stage's); a call's
        metrics record holds its own. Records of older runs without it fall back to the state.
        """
        text_key, canonical_key = _TEXT_KEYS.get((m["node"], m["role"]), (None, None))
        state_text = out.get(text_key) if text_key else None
        state_canonical = out.get(canonical_key) if canonical_key else None
        text = m.get("text", state_text)
        if m["node"] == "reason" or text is None:
            return text, None
        if text == state_text and state_canonical is not None:
            return text, state_canonical
        return text, extract_answer(text, sample.kind, sample.options)

    def _calls(
        self, policy: str, sample: Sample, out: dict[str, Any], ratio: float | None
    ) -> list[CallRecord]:
        calls = []
        for m in out.get("metrics") or []:
            text, canonical = self._text(m, out, sample)
            is_answer = m["node"] == "answer"
            calls.append(
                CallRecord(
                    sample=sample.id,
                    policy=policy,
                    node=m["node"],
                    role=m["role"],
                    model=m["model"],
                    prompt_tokens=m["prompt_tokens"],
                    cached_tokens=m.get("cached_tokens"),
                    generated_tokens=m["generated_tokens"],
                    latency_s=m["latency_s"],
                    ttft_s=m.get("ttft_s"),
                    queue_s=m.get("queue_s"),
                    prefill_s=m.get("prefill_s"),
                    decode_s=m.get("decode_s"),
                    image_tokens=m.get("image_tokens"),
                    finish_reason=m.get("finish_reason", "stop"),
                    distribution=m.get("distribution"),
                    distribution_fallback=m.get("distribution_fallback"),
                    answer_prob=m.get("answer_prob"),
                    text=text,
                    canonical=canonical,
                    keep_ratio=(ratio if ratio is not None else self.base.keep_ratio)
                    if is_answer
                    else None,
                    transfer=out.get("transfer") if is_answer else None,
                    sparsify=dict(out["sparsification"])
                    if is_answer and out.get("sparsification")
                    else None,
                    stage=m.get("stage"),
                    drafter=m.get("drafter"),
                )
            )
        return calls


def _session(
    base: MAIContext,
    branches: bool,
    ratios: list[float],
    lineup: Lineup,
    policies: list[str],
    data: str | None,
    concurrency: int,
    variants: Sequence[str] = ("full",),
    bad_rows: Sequence[object] = (),
) -> SessionRecord:
    return SessionRecord(
        started=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        version=_version(),
        context=base.model_dump(),
        branches=branches,
        keep_ratios=ratios,
        transfer_variants=list(variants),
        models={
            "small": ", ".join(b.name for b in lineup.drafters),
            "large": ", ".join(b.name for b in lineup.chain),
        },
        data=data,
        policies=policies,
        concurrency=concurrency,
        bad_rows=[str(p) for p in bad_rows],
    )


def _check_resume(previous: SessionRecord, now: SessionRecord, out_dir: Path) -> None:
    before, after = previous.model_dump(), now.model_dump()
    changed = [k for k in _COMPARED if before[k] != after[k]]
    if changed:
        detail = "; ".join(f"{k}: {before[k]!r} -> {after[k]!r}" for k in changed)
        raise ConfigError(
            f"{out_dir} holds records made with other settings ({detail})",
            parameter="out",
            value=str(out_dir),
            fix="use a new output folder, or the settings of the records there",
        )


async def arun_eval(
    samples: Sequence[Sample],
    small: VLMBackend | Sequence[VLMBackend],
    large: VLMBackend | Sequence[VLMBackend],
    *,
    out_dir: str | Path,
    policies: Sequence[str] = ("mai",),
    context: MAIContext | dict[str, Any] | None = None,
    concurrency: int = 1,
    branches: bool = False,
    keep_ratios: Sequence[float] = (),
    transfer_variants: Sequence[str] = ("full",),
    progress: bool = True,
    data: str | None = None,
    on_run: Callable[[str, Sample, float], None] | None = None,
    on_bad_row: OnBadRow = "skip",
    bad_rows: Sequence[object] = (),
) -> RunSummary:
    """Run ``policies`` over ``samples`` and append every generation to ``out_dir``.

    Args:
        samples: The dataset's samples (ids unique).
        small: The small model's backend, or several drafter backends.
        large: The large model's backend, or a chain of larger backends, smallest first
            (see :func:`~mai_graph.graph.create_mai_graph`).
        out_dir: Folder of ``records.jsonl`` (created); finished runs there are skipped.
        policies: Any of ``mai``, ``small``, ``large``, ``small_cot``, ``large_cot``.
        context: Base settings (:class:`MAIContext` or a dict of its fields); each run sets
            ``policy`` and ``answer_kind``.
        concurrency: Runs in flight at once, per policy.
        branches: Record every branch of ``mai`` runs, for offline replay and calibration.
        keep_ratios: With ``branches``: more keep ratios to record transfer answers for.
        transfer_variants: With ``branches``: ``full`` (the reasoning as sparsified) and / or
            ``masked`` (its stated final answer left out), recorded at every keep ratio.
        progress: Show a progress bar (on stderr).
        data: The dataset's path, noted in the records.
        on_run: Called after each finished run with ``(policy, sample, credit)``; the credit
            is 1.0 or 0.0 (the VQA accuracy for questions with several human answers).
        on_bad_row: A run whose image does not decode: ``skip`` records it as skipped (with
            its reason; the report counts it) and goes on, ``fail`` raises.
        bad_rows: The dataset's rows skipped when it was read
            (:attr:`~mai_graph.eval.datasets.Dataset.problems`), noted in the records so the
            report counts them.

    Returns:
        A :class:`RunSummary`.

    Raises:
        ConfigError: Bad arguments, or records in ``out_dir`` made with other settings.
        ImageError: With ``on_bad_row="fail"``, a sample's image does not decode (the error
            names the sample).
    """
    if on_bad_row not in get_args(OnBadRow):
        raise ConfigError(
            f"on_bad_row must be skip or fail, got {on_bad_row!r}",
            parameter="on_bad_row",
            value=on_bad_row,
            fix="skip (record the run as skipped and go on) or fail (stop at the first)",
        )
    lineup = Lineup.of(small, large)
    chosen = _check_policies(policies)
    base = MAIContext.coerce(context)
    check_int(concurrency, "concurrency", minimum=1)
    if keep_ratios and not branches:
        raise ConfigError(
            "keep_ratios need branches=True (extra transfer answers are forked from mai runs)",
            parameter="keep_ratios",
            value=list(keep_ratios),
            fix="add --branches",
        )
    if branches and base.drafts > 1:
        raise ConfigError(
            f"branches replay two-model runs; this context asks for {base.drafts} drafts",
            parameter="branches",
            value=base.drafts,
            fix="measure drafter runs live (drop --branches), or record with drafts=1",
        )
    if branches and not lineup.classic:
        raise ConfigError(
            f"branches replay two-model runs; these models are {len(lineup.drafters)} "
            f"drafter(s) and a chain of {len(lineup.chain)}",
            parameter="branches",
            fix="measure drafters and chains live (drop --branches), or record one small and "
            "one large model",
        )
    ratios = _check_ratios(keep_ratios, base.keep_ratio)
    variants = _check_variants(transfer_variants, branches)
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise ConfigError("sample ids must be unique", parameter="samples")
    folder = output_folder(out_dir, flag="out_dir", what="evaluation",
                           owns=lambda f: (f / RECORDS_FILE).is_file())  # fmt: skip
    started = time.perf_counter()
    existing = await asyncio.to_thread(read_records, folder)
    session = _session(base, branches, ratios, lineup, chosen, data, concurrency, variants,
                       bad_rows)  # fmt: skip
    if existing.sessions:
        _check_resume(existing.sessions[0], session, folder)
    by_id = {s.id: s for s in samples}
    for (_, sample_id), run in existing.runs.items():
        if sample_id in by_id and run.record.digest != by_id[sample_id].digest():
            was, now = GROUP_KEY in run.record.meta, GROUP_KEY in by_id[sample_id].meta
            why = ""
            if was != now:
                as_ = {True: "a rotation (--circular, or an MMBench rotation file)",
                       False: "a plain question"}  # fmt: skip
                why = f" (recorded as {as_[was]}, asked as {as_[now]})"
            raise ConfigError(
                f"sample {sample_id!r} in {folder} was recorded from a different dataset row{why}",
                parameter="data",
                value=sample_id,
                fix="use a new output folder when the dataset or --circular changes",
            )
    summary = RunSummary(folder, problems=list(existing.problems))

    def recorded(policy: str, sample: Sample) -> bool:
        skip = existing.skipped.get((policy, sample.id))
        return (policy, sample.id) in existing.runs or (
            skip is not None and skip.digest == sample.digest()  # a changed row runs again
        )

    todo = [(policy, sample) for policy in chosen for sample in samples
            if not recorded(policy, sample)]  # fmt: skip
    summary.skipped = len(chosen) * len(samples) - len(todo)
    writer = await asyncio.to_thread(RecordWriter, folder)
    try:
        await asyncio.to_thread(writer.write, [session])
        evaluation = _Evaluation(lineup, base, branches, ratios, writer, variants)
        for policy in chosen:
            batch = [s for p, s in todo if p == policy]
            if batch:
                bar = _progress(policy, len(batch), progress)
                try:
                    await _run_policy(evaluation, policy, batch, concurrency, bar, on_run,
                                      on_bad_row, summary)  # fmt: skip
                finally:
                    bar.close()
    finally:
        writer.close()
    summary.elapsed_s = time.perf_counter() - started
    return summary


def _progress(policy: str, total: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        desc=f"{policy:<9}",
        unit="run",
        file=sys.stderr,
        disable=not enabled,
        mininterval=0.5,
        leave=True,
    )


async def _run_policy(
    evaluation: _Evaluation,
    policy: str,
    batch: list[Sample],
    concurrency: int,
    bar: Any,
    on_run: Callable[[str, Sample, float], None] | None,
    on_bad_row: OnBadRow,
    summary: RunSummary,
) -> None:
    right = 0.0
    done = 0
    gate = asyncio.Semaphore(concurrency)

    async def one(sample: Sample) -> None:
        nonlocal right, done
        async with gate:
            try:
                credit = await evaluation.run(policy, sample)
            except ImageAccessError:
                raise  # the image policy refuses the dataset's paths: a setting, not a row
            except ImageError as exc:
                await _bad_row(evaluation.writer, policy, sample, exc, on_bad_row, summary)
                bar.update(1)
                return
            except Exception as exc:
                exc.add_note(f"while evaluating sample {sample.id!r} with policy {policy}")
                raise
        right += credit
        done += 1
        summary.done += 1
        bar.set_postfix(acc=f"{right / done:.3f}", refresh=False)
        bar.update(1)
        if on_run is not None:
            on_run(policy, sample, credit)

    try:
        async with asyncio.TaskGroup() as group:
            for sample in batch:
                group.create_task(one(sample))
    except BaseExceptionGroup as errors:
        raise errors.exceptions[0] from None


async def _bad_row(
    writer: RecordWriter,
    policy: str,
    sample: Sample,
    exc: ImageError,
    on_bad_row: OnBadRow,
    summary: RunSummary,
) -> None:
    """A run whose image cannot be used: recorded as skipped, or raised naming the row."""
    text = str(exc)
    reason = text.removesuffix(f". Fix: {exc.fix}") if exc.fix else text
    if on_bad_row == "fail":
        raise ImageError(
            f"bad row: sample {sample.id!r} (policy {policy}): {reason}",
            parameter="data",
            value=sample.id,
            fix="fix or remove the row, or skip bad rows (--on-bad-row skip, on_bad_row='skip')",
        ) from exc
    record = SkippedRecord(sample=sample.id, policy=policy, reason=reason, digest=sample.digest())
    await asyncio.to_thread(writer.write, [record])
    summary.bad_rows.append(f"sample {sample.id!r} ({policy}): {reason}")


def run_eval(
    samples: Sequence[Sample],
    small: VLMBackend | Sequence[VLMBackend],
    large: VLMBackend | Sequence[VLMBackend],
    **kwargs: Any,
) -> RunSummary:
    """Sync :func:`arun_eval` (on mai-graph's background loop, where engines live)."""
    return run_sync(arun_eval(samples, small, large, **kwargs))
