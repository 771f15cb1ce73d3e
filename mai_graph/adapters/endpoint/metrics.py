"""Live gate health of the endpoint: Prometheus metrics over the runs it answered.

``GET /metrics`` of :func:`~mai_graph.adapters.endpoint.app.create_app` serves these, so an
operator can watch
whether MAI pays off on their traffic: how often runs end early, what each route costs in
wall time, and how many tokens each model reads and writes. They are a view of what the
responses already said (each run's ``mai`` field: its route, wall time and per-call records,
models named as served), never a second bookkeeping.

Every app holds its own :class:`prometheus_client.CollectorRegistry` (not the process-wide
default), so several apps in one process keep apart. Label values come from fixed sets
(routes, served model names, graph nodes, outcomes, HTTP statuses), never from a request.

Needs the ``serve`` extra (``prometheus-client``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, get_args

from mai_graph.state import Route

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "EARLY_EXIT_ROUTES",
    "LATENCY_BUCKETS",
    "MAI_ROUTES",
    "Outcome",
    "ServeMetrics",
    "route_label",
]

ROUTES: frozenset[str] = frozenset(get_args(Route))
"""Every route a run can end on (:data:`mai_graph.state.Route`)."""

MAI_ROUTES: frozenset[str] = frozenset(
    {"agree", "extract_agree", "large_confident", "transfer", "human"}
)
"""The routes of runs MAI decided (policy ``mai``); the baselines' routes (``small``,
``large``, ``small_cot``, ``large_cot``: a client asked for one model) are the others."""

EARLY_EXIT_ROUTES: frozenset[str] = frozenset({"agree", "large_confident"})
"""The routes that end a run at verification, on the two short answers, before any model
reasons: the runs where MAI saves the most. ``extract_agree`` is not one (the small model
has reasoned by then)."""

LATENCY_BUCKETS: tuple[float, ...] = (
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
"""Upper bounds (seconds) of the run latency histogram: from an early exit on warm engines
(tens of milliseconds) to a long transfer (half a minute and more)."""

Outcome = Literal["answered", "refused", "failed", "cancelled"]
"""How a chat completions request ended.

- ``answered``: its run finished and the answer was sent (the status is 200).
- ``refused``: turned away before a run started (a bad key, body, setting or image; 4xx).
- ``failed``: its run failed (a backend down, a prompt too long; the status its error
  carries, also when a stream had already started and the error came as an event).
- ``cancelled``: its client left, or the server stopped, while the run was in flight (499).
"""


def route_label(route: Any) -> str:
    """A run's route as a label value: one of :data:`ROUTES`, else ``other``.

    >>> route_label("transfer"), route_label("made up")
    ('transfer', 'other')
    """
    return route if isinstance(route, str) and route in ROUTES else "other"


class ServeMetrics:
    """One endpoint's Prometheus metrics, in a registry of its own.

    The endpoint calls :meth:`running` around each run, :meth:`finished` with each answered
    run's ``mai`` field, and :meth:`request` for refusals and failures; :meth:`scrape` is the
    text ``GET /metrics`` serves.

    Example:
        >>> m = ServeMetrics()
        >>> m.finished({"route": "agree", "wall_s": 0.04, "metrics": [
        ...     {"model": "mai/small", "node": "verify", "prompt_tokens": 90,
        ...      "cached_tokens": 64, "generated_tokens": 1, "latency_s": 0.03}]})
        >>> m.early_exit_share()
        1.0
        >>> b"mai_runs_total{route=" in m.scrape()
        True
    """

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry: CollectorRegistry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "mai_requests", "Chat completions requests by how they ended (outcome) and "
            "HTTP status.", ["outcome", "status"], registry=r,
        )  # fmt: skip
        self.runs = Counter(
            "mai_runs", "Answered runs by the route they ended on.", ["route"], registry=r
        )
        self.latency = Histogram(
            "mai_run_latency_seconds", "Wall time of answered runs by route (the response's "
            "mai.wall_s).", ["route"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.tokens = Counter(
            "mai_model_tokens", "Tokens of the model calls of answered runs, by served "
            "model and kind (prompt, cached: prompt tokens from the prefix cache, generated).",
            ["model", "kind"], registry=r,
        )  # fmt: skip
        self.calls = Counter(
            "mai_model_calls", "Model calls of answered runs, by served model and graph node.",
            ["model", "node"], registry=r,
        )  # fmt: skip
        self.model_seconds = Counter(
            "mai_model_seconds", "Seconds the model calls of answered runs took, by served "
            "model (calls overlap: verification asks both models at once).", ["model"],
            registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "mai_runs_in_flight", "Runs holding a concurrency slot now.", registry=r
        )
        share = Gauge(
            "mai_early_exit_share", "Share of the answered runs MAI decided (routes agree, "
            "extract_agree, large_confident, transfer, human) that ended at verification "
            "(agree, large_confident); NaN before the first.", registry=r,
        )  # fmt: skip
        share.set_function(self.early_exit_share)
        self._by_route: dict[str, int] = {}
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        """The labelled child of ``metric``, looked up once (label sets are bounded)."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def running(self) -> _Running:
        """A context manager around one run: counts it in flight, and as cancelled if it is."""
        return _Running(self)

    def request(self, outcome: Outcome, status: int) -> None:
        """Count one chat completions request that ended with ``outcome`` and ``status``."""
        self._child(self.requests, outcome, str(int(status))).inc()

    def finished(self, mai: Mapping[str, Any]) -> None:
        """Record an answered run from its response's ``mai`` field (models as served)."""
        route = route_label(mai.get("route"))
        self._by_route[route] = self._by_route.get(route, 0) + 1
        self._child(self.requests, "answered", "200").inc()
        self._child(self.runs, route).inc()
        self._child(self.latency, route).observe(float(mai.get("wall_s") or 0.0))
        for m in mai.get("metrics") or ():
            model = str(m["model"])
            self._child(self.calls, model, str(m.get("node"))).inc()
            self._child(self.tokens, model, "prompt").inc(m["prompt_tokens"])
            self._child(self.tokens, model, "cached").inc(m["cached_tokens"] or 0)
            self._child(self.tokens, model, "generated").inc(m["generated_tokens"])
            self._child(self.model_seconds, model).inc(m["latency_s"])

    def early_exit_share(self) -> float:
        """Runs that ended at verification over all runs MAI decided (NaN before any)."""
        decided = sum(n for route, n in self._by_route.items() if route in MAI_ROUTES)
        early = sum(n for route, n in self._by_route.items() if route in EARLY_EXIT_ROUTES)
        return early / decided if decided else math.nan

    def scrape(self) -> bytes:
        """The registry in Prometheus' text format (serve it as ``CONTENT_TYPE_LATEST``)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _Running:
    """:meth:`ServeMetrics.running`: in flight while inside; a cancellation is counted.

    An async context manager, so it joins the run's ``async with`` of its concurrency slot.
    """

    __slots__ = ("_metrics",)

    def __init__(self, metrics: ServeMetrics) -> None:
        self._metrics = metrics

    async def __aenter__(self) -> None:
        self._metrics.in_flight.inc()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._metrics.in_flight.dec()
        if kind is not None and issubclass(kind, asyncio.CancelledError | GeneratorExit):
            self._metrics.request("cancelled", 499)
