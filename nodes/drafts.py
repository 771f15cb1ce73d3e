"""Several drafts per run: the verify, reason, extract and sparsify steps over k drafts.

A run drafts more than once when the graph has several drafter backends or the run asks for
``drafts > 1`` (samples of each small model at ``draft_temperature``). Every step runs its k
calls concurrently (engines batch them): k short answers beside the large model's (the gate is
``draft_quorum``); on escalation k chains of thought, then k S2 answers; the reasonings are
ranked (``draft_rank``) and the best ``transfer_drafts`` are sparsified for the large model.
The best draft also fills the run's single-draft keys (``reasoning``, ``s2_answer``, ...), so
everything downstream reads a run with drafts as it reads a run without.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar, cast

from mai_graph.answers import extract_answer
from mai_graph.calls import Question, cot_request, s2_request, short_request
from mai_graph.gate import after_disagreement, agreement_exits, quorum_exits
from mai_graph.inputs.limits import check_backends
from mai_graph.inputs.sources import ImagePolicy
from mai_graph.lineup import Drafter, Lineup, rank_drafts
from mai_graph.scoring import TokenScorer
from mai_graph.state import Draft, MAIState, NodeMetrics, Sparsification

from ._common import RunScope, call, tagged
from .sparsify import sparsify
from .verify import cancel_quietly, consume_inputs, read_question

T = TypeVar("T")

_REASONING = ("reasoning", "reasoning_token_ids", "reasoning_tokens", "reasoning_logprobs")


async def gather_all(calls: Sequence[Awaitable[T]]) -> list[T]:
    """Await calls concurrently, results in order; the first failure cancels the rest."""
    tasks: list[asyncio.Task[T]] = []
    try:
        async with asyncio.TaskGroup() as tg:
            tasks += [tg.create_task(c) for c in calls]  # type: ignore[arg-type]
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    return [t.result() for t in tasks]


def _drafter_record(rec: NodeMetrics, d: Drafter) -> NodeMetrics:
    return {**rec, "drafter": d.index}


async def _short(q: Question, scope: RunScope, d: Drafter) -> tuple[Any, NodeMetrics]:
    request = d.shape(short_request(q, scope.ctx), scope.ctx)
    gen, rec = await call(d.backend, request, "verify", "small", tagged(scope, drafter=d.index))
    return gen, _drafter_record(rec, d)


async def _reason(q: Question, scope: RunScope, d: Drafter) -> tuple[dict[str, Any], NodeMetrics]:
    request = d.shape(cot_request(q, scope.ctx), scope.ctx)
    gen, rec = await call(d.backend, request, "reason", "small", tagged(scope, drafter=d.index))
    fields = {
        "reasoning": gen.text,
        "reasoning_token_ids": list(gen.token_ids),
        "reasoning_tokens": list(gen.tokens) if gen.tokens is not None else None,
        "reasoning_logprobs": list(gen.logprobs) if gen.logprobs is not None else None,
    }
    return fields, _drafter_record(rec, d)


def _with_reasoning(
    drafts: Sequence[Draft], results: Sequence[tuple[dict[str, Any], NodeMetrics]]
) -> tuple[list[Draft], list[NodeMetrics]]:
    merged = [cast(Draft, {**d, **fields}) for d, (fields, _) in zip(drafts, results)]
    return merged, [rec for _, rec in results]


async def verify_drafts(
    state: MAIState, scope: RunScope, lineup: Lineup, policy: ImagePolicy | None = None
) -> dict[str, Any]:
    """The first node with several drafts: k short answers and the large one, concurrently.

    Ends the run (``agree``) when the drafts' answers pass ``draft_quorum`` with the large
    model's, or (``large_confident``) when the large model alone is sure enough; otherwise the
    drafts reason next. The first draft's answer also fills ``small_answer`` (and its
    ``_canonical`` / ``_prob``). With ``speculative_cot`` every draft's reasoning starts with
    the short answers and is cancelled on an exit.
    """
    ctx = scope.ctx
    q = await read_question(state, scope, policy)
    drafters = lineup.drafts(ctx)
    large = lineup.chain[0]
    if q.videos or len(q.images) > 1:
        check_backends(q.all_images, q.videos, [*lineup.drafters, large])
    update = consume_inputs(state, q)
    records: list[Any] = update["metrics"].value
    speculative: asyncio.Future[Any] | None = None
    try:
        async with asyncio.TaskGroup() as tg:
            shorts = [tg.create_task(_short(q, scope, d)) for d in drafters]
            large_task = tg.create_task(
                call(large, short_request(q, ctx), "verify", "large", scope)
            )
            if ctx.speculative_cot:  # queued after the short answers, outside the group
                speculative = asyncio.ensure_future(
                    gather_all([_reason(q, scope, d) for d in drafters])
                )
    except BaseExceptionGroup as group:
        await cancel_quietly(speculative)
        raise group.exceptions[0] from None
    except BaseException:
        await cancel_quietly(speculative)
        raise
    gl, rl = large_task.result()
    drafts: list[Draft] = []
    for d, task in zip(drafters, shorts):
        gen, rec = task.result()
        records.append(rec)
        drafts.append(
            Draft(
                drafter=d.index,
                model=gen.model,
                answer=gen.text,
                canonical=extract_answer(gen.text, q.kind, q.options),
                prob=rec["answer_prob"],
            )
        )
    records.append(rl)
    cl, pl = extract_answer(gl.text, q.kind, q.options), rl["answer_prob"]
    first = drafts[0]
    update.update(
        drafts=drafts,
        small_answer=first["answer"],
        small_canonical=first["canonical"],
        small_prob=first["prob"],
        large_answer=gl.text,
        large_canonical=cl,
        large_prob=pl,
    )
    if quorum_exits([(d["canonical"], d["prob"]) for d in drafts], cl, pl, ctx):
        update.update(answer=gl.text, canonical=cl, route="agree")
    elif after_disagreement(pl, ctx) == "large":
        update.update(answer=gl.text, canonical=cl, route="large_confident")
    if update.get("route") is not None:
        await cancel_quietly(speculative)
    elif speculative is not None:
        try:
            results = await speculative
        except BaseException:
            await cancel_quietly(speculative)
            raise
        update["drafts"], recs = _with_reasoning(drafts, results)
        records += recs
    return update


async def reason_drafts(state: MAIState, scope: RunScope, lineup: Lineup) -> dict[str, Any]:
    """Each draft writes its chain of thought, concurrently (none when verify already did)."""
    drafts = state.get("drafts") or []
    if drafts and all(d.get("reasoning") is not None for d in drafts):
        return {}
    q = Question.from_state(state, scope.ctx)
    drafters = lineup.drafts(scope.ctx)
    results = await gather_all([_reason(q, scope, d) for d in drafters])
    merged, records = _with_reasoning(drafts, results)
    return {"drafts": merged, "metrics": records}


async def extract_drafts(state: MAIState, scope: RunScope, lineup: Lineup) -> dict[str, Any]:
    """Each draft's S2 answer, concurrently; the drafts are ranked and the best one leads.

    The best draft's reasoning and S2 answer fill ``reasoning`` and ``s2_answer`` (and their
    companions); its S2 answer meeting the large model's short answer under the gate ends the
    run as ``extract_agree`` (when ``s2_exit``).
    """
    ctx = scope.ctx
    q = Question.from_state(state, ctx)
    drafters = lineup.drafts(ctx)
    drafts = state.get("drafts") or []

    async def s2(d: Drafter, draft: Draft) -> tuple[Any, NodeMetrics]:
        request = s2_request(
            q, ctx, draft.get("reasoning") or "", draft.get("reasoning_token_ids") or None
        )
        gen, rec = await call(
            d.backend, request, "extract", "small", tagged(scope, drafter=d.index)
        )
        return gen, _drafter_record(rec, d)

    results = await gather_all([s2(d, draft) for d, draft in zip(drafters, drafts)])
    merged: list[Draft] = []
    for draft, (gen, rec) in zip(drafts, results):
        canonical = extract_answer(gen.text, q.kind, q.options)
        merged.append(
            {
                **draft,
                "s2_answer": gen.text,
                "s2_canonical": canonical,
                "s2_prob": rec["answer_prob"],
            }
        )
    order = rank_drafts(merged, ctx)
    for place, i in enumerate(order):
        merged[i] = {**merged[i], "rank": place}
    best = merged[order[0]]
    update: dict[str, Any] = {
        "drafts": merged,
        "metrics": [rec for _, rec in results],
        **{k: best.get(k) for k in _REASONING},
        "s2_answer": best["s2_answer"],
        "s2_canonical": best["s2_canonical"],
        "s2_prob": best["s2_prob"],
    }
    if ctx.s2_exit and agreement_exits(
        best["s2_canonical"],
        state.get("large_canonical") or "",
        best["s2_prob"],
        state.get("large_prob"),
        ctx,
    ):
        update.update(
            answer=best["s2_answer"], canonical=best["s2_canonical"], route="extract_agree"
        )
    return update


async def sparsify_drafts(
    state: MAIState, scope: RunScope, scorers: Mapping[str, TokenScorer], share_ids: bool
) -> dict[str, Any]:
    """Sparsify the best ``transfer_drafts`` reasonings, each as the single-draft step would.

    Each chosen draft gets its ``transfer`` (and ``transfer_token_ids``) for the large model;
    the run's ``transfer`` holds their texts, one per line, and one ``sparsification`` sums
    them (``dropped_mass`` weighted by tokens).
    """
    ctx = scope.ctx
    drafts = list(state.get("drafts") or [])
    order = sorted(range(len(drafts)), key=lambda i: drafts[i].get("rank", drafts[i]["drafter"]))
    infos: list[Sparsification] = []
    texts: list[str] = []
    for i in order[: ctx.transfer_drafts]:
        view: Any = {**state, **{k: drafts[i].get(k) for k in (*_REASONING, "s2_answer")}}
        out = await sparsify(view, ctx, scorers, share_ids)
        drafts[i] = cast(
            Draft,
            {**drafts[i], "transfer": out["transfer"],
             "transfer_token_ids": out["transfer_token_ids"]},
        )  # fmt: skip
        texts.append(out["transfer"])
        infos.append(out["sparsification"])
    tokens_in = sum(i["tokens_in"] for i in infos)
    tokens_out = sum(i["tokens_out"] for i in infos)
    dropped = sum(i["dropped_mass"] * i["tokens_in"] for i in infos)
    info = Sparsification(
        strategy=ctx.sparsify,
        tokens_in=tokens_in,
        tokens_out=tokens_out,
        kept_ratio=tokens_out / tokens_in if tokens_in else 1.0,
        dropped_mass=dropped / tokens_in if tokens_in else 0.0,
        scoring_s=sum(i["scoring_s"] for i in infos),
    )
    if ctx.transfer_mask_answer:
        info["masked_tokens"] = sum(i.get("masked_tokens", 0) for i in infos)
    return {
        "drafts": drafts,
        "transfer": "\n".join(texts),
        "transfer_token_ids": None,
        "sparsification": info,
    }
