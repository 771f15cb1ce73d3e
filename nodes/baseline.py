"""The short baselines: under the ``small`` / ``large`` policy one model answers, and that is it."""

from __future__ import annotations

from typing import Any

from mai_graph import flow
from mai_graph.calls import canonical, short_request
from mai_graph.lineup import Lineup
from mai_graph.state import MAIState

from ._common import MAIRuntime, Node, call


async def baseline(state: MAIState, runtime: MAIRuntime, lineup: Lineup) -> dict[str, Any]:
    """The policy's model (the smallest for ``small``, the largest for ``large``) answers short.

    Its call is recorded as a short answer (``node`` ``verify``), as in MAI runs.
    """
    ctx = runtime.context
    q = state["asked"]
    side = ctx.policy
    [model] = flow.called(side, lineup.layout)
    backend = lineup.backend(model)
    gen, rec = await call(backend, short_request(q, ctx), "verify", side, runtime)
    canon = canonical(gen.text, q)
    return {
        f"{side}_answer": gen.text,
        f"{side}_canonical": canon,
        f"{side}_prob": rec["answer_prob"],
        f"{side}_distribution": gen.distribution,
        "answer": gen.text,
        "canonical": canon,
        "route": side,
        "metrics": [rec],
    }


def make_baseline(lineup: Lineup) -> Node:
    """The ``baseline`` node."""
    return Node("baseline", lambda state, runtime: baseline(state, runtime, lineup))
