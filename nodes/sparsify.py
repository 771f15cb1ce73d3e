"""Sparsification: cut the reasoning to its most important tokens, in original order."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from mai_graph.backends.base import VLMBackend, VocabularyBackend
from mai_graph.calls import Question, s2_request
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.lineup import Lineup
from mai_graph.scoring import ReasoningInput, TokenScorer, select_tokens, split_pieces
from mai_graph.scoring.mask import answer_statement
from mai_graph.state import MAIState, Sparsification

from ._common import Node, RunScope


def reasoning_input(state: MAIState, q: Question, ctx: MAIContext) -> ReasoningInput:
    """The reasoning as scorers see it: pieces, ids, logprobs, question, the S2 prompt."""
    text = state.get("reasoning") or ""
    pieces = state.get("reasoning_tokens")
    ids = state.get("reasoning_token_ids") or None
    logprobs = state.get("reasoning_logprobs")
    if not pieces or (ids is not None and len(ids) != len(pieces)):
        pieces, ids = split_pieces(text), None
        logprobs = logprobs if logprobs is not None and len(logprobs) == len(pieces) else None
    return ReasoningInput(
        tokens=tuple(pieces),
        token_ids=tuple(ids) if ids else None,
        logprobs=tuple(logprobs) if logprobs is not None else None,
        question=q.text,
        options=tuple(q.options.values()) if q.options else None,
        letters=tuple(q.options) if q.options else (),
        s2_messages=s2_request(q, ctx, text, ids).messages,
    )


async def same_tokenizer(small: VLMBackend, large: VLMBackend) -> bool:
    """Whether both backends declare the same vocabulary (then ids transfer as they are).

    Asking may start an engine that has not started yet (e.g. a thread resumed in a fresh
    process at this node).
    """
    if not (isinstance(small, VocabularyBackend) and isinstance(large, VocabularyBackend)):
        return False
    return await small.vocab_fingerprint() == await large.vocab_fingerprint()


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
    reasoning = reasoning_input(state, Question.from_state(state, ctx), ctx)
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


def make_sparsify(lineup: Lineup, scorers: Mapping[str, TokenScorer]) -> Node:
    """The ``sparsify`` node with its scorers bound (the tokenizer check runs once per stage).

    Runs with several drafts sparsify the best ``transfer_drafts`` reasonings.
    """
    from .drafts import sparsify_drafts

    shared: dict[int, bool] = {}

    async def share_ids(stage: int) -> bool:
        if stage not in shared:
            if stage == 1:  # every drafter's ids must mean the same to the large model
                large = lineup.chain[0]
                same = [await same_tokenizer(d, large) for d in lineup.drafters]
                shared[stage] = all(same)
            else:
                shared[stage] = await same_tokenizer(*lineup.pair(stage))
        return shared[stage]

    async def core(state: MAIState, scope: RunScope) -> dict[str, Any]:
        stage = state.get("stage") or 1
        ctx = scope.ctx
        if stage == 1 and ctx.transfer_drafts > 1 and lineup.draft_count(ctx) > 1:
            return await sparsify_drafts(state, scope, scorers, await share_ids(1))
        return await sparsify(state, ctx, scorers, await share_ids(stage))

    return Node("sparsify", core)
