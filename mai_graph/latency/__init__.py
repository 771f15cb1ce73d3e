"""What each route costs: the latency model (:mod:`.model`) and its measurement (:mod:`.profile`).

``mai-graph profile`` measures calls on real engines and fits :class:`LatencyModel`;
``mai-graph eval`` prices every route with it. The core never imports this package.
"""

from mai_graph.latency.model import (
    CallSample,
    CallTokens,
    EngineProfile,
    LatencyModel,
    Workload,
    fit_engine,
    fit_overlap,
    parse_what_if,
)

__all__ = [
    "CallSample",
    "CallTokens",
    "EngineProfile",
    "LatencyModel",
    "Workload",
    "fit_engine",
    "fit_overlap",
    "parse_what_if",
]
