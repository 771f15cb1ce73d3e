"""Sparsification: cut the reasoning to its most important tokens, in original order."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

from mai_graph.backends.base import VLMBackend, VocabularyBackend, capabilities_of
from mai_graph.calls import Question, s2_request
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.lineup import Lineup
from mai_graph.scoring import ReasoningInput, TokenScorer, select_tokens, split_pieces
from mai_graph.scoring.mask import answer_statement
from mai_graph.state import Draft, MAIState, Sparsification

from ._common import MAIRuntime, Node
from .drafts import REASONING_KEYS


def reasoning_input(state: MAIState, q: Question, ctx: MAIContext) -> ReasoningInput:
    """The reasoning as scorers see it: pieces, ids, logprobs, question, the S2 prompt."""
    text = state.get("reasoning") or ""
    pieces = state.get("reasoning_tokens")
    ids = state.get("reasoning_token_ids") or None
    logprobs = state.get("reasoning_logprobs")
    options = q["options"]
    if not pieces or (ids is not None and len(ids) != len(pieces)):
        pieces, ids = split_pieces(text), None
        logprobs = logprobs if logprobs is not None and len(logprobs) == len(pieces) else None
    return ReasoningInput(
        tokens=tuple(pieces),
        token_ids=tuple(ids) if ids else None,
        logprobs=tuple(logprobs) if logprobs is not None else None,
        question=q["question"],
        options=tuple(options.values()) if options else None,
        letters=tuple(options) if options else (),
        s2_messages=s2_request(q, ctx, text, ids).messages,
    )


async def same_tokenizer(small: VLMBackend, large: VLMBackend) -> bool:
    """Whether both backends declare the same vocabulary (then ids transfer as they are).

    Asking may start an engine that has not started yet (e.g. a thread resumed in a fresh
    process at this node).
    """
    if not (capabilities_of(small).vocabulary and capabilities_of(large).vocabulary):
        return False
    first, second = cast(VocabularyBackend, small), cast(VocabularyBackend, large)
    return await first.vocab_fingerprint() == await second.vocab_fingerprint()


async def sparsify(
    state: MAIState,
    ctx: MAIContext,
    scorers: Mapping[str, TokenScorer],
    share_ids: bool,
) -> dict[str, Any]:
    """Score the reasoning's tokens with the context's strategy and keep the best of them.

    ``keep_ratio`` (or ``keep_mass``) of the tokens are kept in their original order; digits,
    option letters and negations always (``force_keep``); whole words when ``whole_words``.
    ``none`` keeps everything. With ``share_ids`` the kept token ids travel to the large model
    as they are; otherwise their text does. With ``transfer_mask_answer`` the reasoning's
    stated final answer (:func:`~mai_graph.scoring.mask.answer_statement`) is never sent.
    """
    reasoning = reasoning_input(state, state["asked"], ctx)
    tokens = reasoning.tokens
    live = [i for i, t in enumerate(tokens) if t]  # special tokens decode to "": never sent
    masked = 0
    if ctx.transfer_mask_answer:
        hidden = set(answer_statement(tokens, state.get("s2_answer")))
        masked = sum(1 for i in live if i in hidden)
        live = [i for i in live if i not in hidden]
    start = time.perf_counter()
    if ctx.sparsify == "none" or not live:
        kept, dropped = live[: ctx.max_transfer_tokens], 0.0
    else:
        scorer = scorers.get(ctx.sparsify)
        if scorer is None:
            raise ConfigError(
                f"sparsify strategy {ctx.sparsify!r} has no scorer in this graph "
                f"(available: {sorted(scorers) + ['none']})",
                parameter="sparsify",
                value=ctx.sparsify,
                fix="pass scorers={'attention': AttentionScorer(small_checkpoint)} to "
                "create_mai_graph, or choose another strategy",
            )
        scores = list(await scorer.score(reasoning))
        sub_tokens = [tokens[i] for i in live]
        selection = select_tokens(
            sub_tokens,
            [scores[i] for i in live],
            ctx.keep_ratio,
            keep_mass=ctx.keep_mass,
            whole_words=ctx.whole_words,
            force_keep=ctx.force_keep,
            letters=reasoning.letters,
            max_tokens=ctx.max_transfer_tokens,
        )
        kept, dropped = [live[i] for i in selection.kept], selection.dropped_mass
    info = Sparsification(
        strategy=ctx.sparsify,
        tokens_in=len(live),
        tokens_out=len(kept),
        kept_ratio=len(kept) / len(live) if live else 1.0,
        dropped_mass=dropped,
        scoring_s=time.perf_counter() - start,
    )
    if ctx.transfer_mask_answer:
        info["masked_tokens"] = masked
    update: dict[str, Any] = {
        "transfer": "".join(tokens[i] for i in kept).strip(),
        "transfer_token_ids": None,
        "sparsification": info,
    }
    if share_ids and reasoning.token_ids:
        update["transfer_token_ids"] = [reasoning.token_ids[i] for i in kept]
    return update


def transferred(state: MAIState, ctx: MAIContext, stage: int) -> list[int]:
    """Which drafts' reasonings the large model reads: the best ``transfer_drafts``, or none.

    None (an empty list) means the run's own keys: one draft, a later stage, or one transfer.
    """
    drafts = state.get("drafts") or []
    if stage > 1 or ctx.transfer_drafts <= 1 or len(drafts) <= 1:
        return []
    order = sorted(range(len(drafts)), key=lambda i: drafts[i].get("rank", drafts[i]["drafter"]))
    return order[: ctx.transfer_drafts]


def combined(infos: list[Sparsification], ctx: MAIContext) -> Sparsification:
    """One sparsification record for several drafts (``dropped_mass`` weighted by tokens)."""
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
    return info


async def sparsify_drafts(
    state: MAIState,
    ctx: MAIContext,
    chosen: list[int],
    scorers: Mapping[str, TokenScorer],
    share_ids: bool,
) -> dict[str, Any]:
    """Sparsify each chosen draft's reasoning as :func:`sparsify` does the run's own.

    Each chosen draft gets its ``transfer`` (and ``transfer_token_ids``) for the large model;
    the run's ``transfer`` holds their texts, one per line, and one ``sparsification`` sums
    them.
    """
    drafts = list(state.get("drafts") or [])
    infos: list[Sparsification] = []
    texts: list[str] = []
    for i in chosen:
        fields = (*REASONING_KEYS, "s2_answer")
        view: Any = {**state, **{k: drafts[i].get(k) for k in fields}}
        out = await sparsify(view, ctx, scorers, share_ids)
        drafts[i] = cast(
            Draft,
            {**drafts[i], "transfer": out["transfer"],
             "transfer_token_ids": out["transfer_token_ids"]},
        )  # fmt: skip
        texts.append(out["transfer"])
        infos.append(out["sparsification"])
    return {
        "drafts": drafts,
        "transfer": "\n".join(texts),
        "transfer_token_ids": None,
        "sparsification": combined(infos, ctx),
    }


def make_sparsify(lineup: Lineup, scorers: Mapping[str, TokenScorer], stage: int = 1) -> Node:
    """The ``sparsify`` node of ``stage`` (its tokenizer check runs once, on first use)."""
    if stage == 1:  # every drafter's ids must mean the same to the large model
        pairs = [(d, lineup.chain[0]) for d in lineup.drafters]
    else:
        pairs = [lineup.pair(stage)]
    shared: list[bool] = []

    async def share_ids() -> bool:
        if not shared:
            shared.append(all([await same_tokenizer(s, large) for s, large in pairs]))
        return shared[0]

    async def core(state: MAIState, runtime: MAIRuntime) -> dict[str, Any]:
        ctx = runtime.context
        chosen = transferred(state, ctx, stage)
        if chosen:
            return await sparsify_drafts(state, ctx, chosen, scorers, await share_ids())
        return await sparsify(state, ctx, scorers, await share_ids())

    return Node("sparsify", core)
