"""Orchestration overhead: the MAI graph vs the same node calls wired by hand with asyncio.

Zero-latency backends return a fixed generation at once, so what is timed is orchestration:
LangGraph's scheduling, state merging and channel writes on top of the nodes' own work (prompt
building, answer extraction, sparsification), which the plain version does too.

    python benchmarks/overhead.py [--runs 1000]

Prints, per route, the median per-run time (over 5 rounds, interleaved) of the graph, of the
plain version (the nodes' own work: prompts, answer extraction, sparsification), and of
LangGraph's floor: a graph of the same shape whose nodes do nothing (what any LangGraph graph of
this shape costs per run on this machine), its edges routed as the MAI graph routes them
(:class:`mai_graph.graph.Router`, evaluated in place) and, for reference, as plain sync
functions (LangGraph runs those in a thread of the default executor under ``ainvoke``). Then
graph / floor, and where the graph's time goes: the floor, the nodes' work, and the rest
(graph - floor - plain: mai-graph's wiring, state size and schema filtering).

Then the cost of tracing (``mai_graph.tracing``, needs the ``otel`` extra): per route, the
graph with tracing off and on, interleaved: on with an SDK provider batching spans to an
in-memory exporter, and batching them over OTLP/HTTP to a receiver process
(``tests/otlp_receiver.py``); and what tracing's hooks cost a
run while it is off (timed one by one).
"""

import argparse
import asyncio
import contextlib
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

from langgraph.types import Overwrite

from mai_graph import Generation, MAIContext, create_mai_graph
from mai_graph.lineup import Lineup
from mai_graph.nodes._common import offline
from mai_graph.nodes.answer import answer
from mai_graph.nodes.extract import extract
from mai_graph.nodes.prepare import make_prepare
from mai_graph.nodes.reason import reason
from mai_graph.nodes.sparsify import sparsify
from mai_graph.nodes.verify import verify
from mai_graph.results import RESULTS_HELP, command_line, recording
from mai_graph.scoring import default_scorers, split_pieces

REASONING = " ".join(
    "the square in the middle is red while the two circles are blue so option A fits".split() * 8
)


class ZeroBackend:
    """Answers instantly from a per-purpose table; no bookkeeping."""

    def __init__(self, name, table):
        self.name = name
        self._gens = {
            purpose: Generation(
                text=text, model=name, prompt_tokens=100, generated_tokens=len(split_pieces(text)),
                latency_s=0.0, cached_tokens=0, tokens=tuple(split_pieces(text)),
                logprobs=tuple(-float(len(p)) for p in split_pieces(text)),
            )
            for purpose, text in table.items()
        }  # fmt: skip

    async def generate(self, request):
        return self._gens[request.purpose]


SCORERS = default_scorers(None)
ROUTES = {
    "agree": ({"short": "A"}, {"short": "A"}),
    "transfer": ({"short": "A", "cot": REASONING, "s2": "C"}, {"short": "B", "answer": "D"}),
}


@functools.cache
def _lineup(small, large):
    """The lineup, built once per pair as the graph builds it (not per run)."""
    return Lineup.of(small, large)


async def plain(state, ctx, small, large, updates=None):
    """The same nodes, called and merged by hand (``updates``: filled with each node's update)."""
    runtime = offline(ctx)
    names = iter(("prepare", "verify", "reason", "extract", "sparsify", "answer"))

    def merge(state, update):
        if updates is not None:
            updates[next(names)] = dict(update)
        new = update.pop("metrics", [])
        if isinstance(new, Overwrite):
            metrics = list(new.value)
        else:
            metrics = [*(state.get("metrics") or ()), *new]
        return {**state, **update, "metrics": metrics}

    lineup = _lineup(small, large)
    state = merge(state, await make_prepare(lineup, None, False).core(state, runtime))
    state = merge(state, await verify(state, runtime, lineup))
    if state.get("route"):
        return state
    state = merge(state, await reason(state, runtime, lineup))
    state = merge(state, await extract(state, runtime, lineup))
    if state.get("route"):
        return state
    state = merge(state, await sparsify(state, ctx, SCORERS, False))
    return merge(state, await answer(state, runtime, lineup))


def floor_graph(route, routed=True, updates=None):
    """LangGraph's own floor: the same shape, nodes that only write the route.

    ``routed``: its edges are :class:`~mai_graph.graph.Router` runnables, as in the MAI graph;
    otherwise plain sync functions. ``updates``: each node returns the update the MAI graph's
    node made (state writes as the graph's, none of the nodes' work).
    """
    from langgraph.graph import END, START, StateGraph

    from mai_graph.graph import Router, route_after_extract, route_after_verify
    from mai_graph.state import MAIState

    edge = Router if routed else (lambda fn: fn)

    async def verify_(state):
        return {"route": "agree"} if route == "agree" else {}

    async def noop(state):
        return {}

    async def answer_(state):
        return {"route": "transfer"}

    def replay(name):
        async def node(state):
            return dict(updates[name])

        return node

    def policy(state):
        return "verify"

    b = StateGraph(MAIState)
    for name, fn in (("prepare", noop), ("verify", verify_), ("baseline", noop),
                     ("reason", noop), ("extract", noop), ("sparsify", noop),
                     ("answer", answer_)):  # fmt: skip
        if updates is not None and name in updates:
            fn = replay(name)
        b.add_node(name, fn)
    b.add_edge(START, "prepare")
    b.add_conditional_edges(
        "prepare", edge(policy), {"verify": "verify", "baseline": "baseline", "reason": "reason"}
    )
    b.add_edge("baseline", END)
    b.add_conditional_edges("verify", edge(route_after_verify), {"done": END, "disagree": "reason"})
    b.add_edge("reason", "extract")
    b.add_conditional_edges(
        "extract", edge(route_after_extract), {"done": END, "transfer": "sparsify"}
    )
    b.add_edge("sparsify", "answer")
    b.add_edge("answer", END)
    return b.compile()


async def timed(fn, runs):
    start = time.perf_counter()
    for _ in range(runs):
        await fn()
    return (time.perf_counter() - start) / runs


async def main(runs: int, rounds: int) -> dict:
    ctx = MAIContext()
    state = {
        "question": "Which colour is the square?",
        "options": ["red", "blue", "green", "yellow"],
    }
    print(
        f"{'route':<10} {'graph ms':>9} {'plain ms':>9} {'floor ms':>9} {'writes ms':>10}"
        f" {'graph/floor':>12} {'sync edges ms':>14}   where the graph's time goes"
    )
    data: dict = {}
    for route, (small_table, large_table) in ROUTES.items():
        small, large = ZeroBackend("small", small_table), ZeroBackend("large", large_table)
        graph = create_mai_graph(small, large).compile()
        out = await graph.ainvoke(state, context=ctx)
        updates = {}
        ref = await plain(state, ctx, small, large, updates)
        assert out["route"] == ref["route"] == route, (out["route"], ref["route"])
        floors = {
            "floor": floor_graph(route),
            "writes": floor_graph(route, updates=updates),
            "sync": floor_graph(route, routed=False),
        }
        times = {name: [] for name in ("graph", "plain", *floors)}
        for _ in range(rounds):
            times["floor"].append(await timed(lambda f=floors["floor"]: f.ainvoke(state), runs))
            times["graph"].append(await timed(lambda g=graph: g.ainvoke(state, context=ctx), runs))
            times["writes"].append(await timed(lambda f=floors["writes"]: f.ainvoke(state), runs))
            times["plain"].append(
                await timed(lambda s=small, l=large: plain(state, ctx, s, l), runs)  # noqa: E741
            )
            times["sync"].append(await timed(lambda f=floors["sync"]: f.ainvoke(state), runs))
        m = {name: statistics.median(ts) for name, ts in times.items()}
        g, p, f, w = m["graph"], m["plain"], m["floor"], m["writes"]
        rest = g - w - p
        print(
            f"{route:<10} {g * 1e3:>9.3f} {p * 1e3:>9.3f} {f * 1e3:>9.3f} {w * 1e3:>10.3f}"
            f" {g / f:>11.2f}x {m['sync'] * 1e3:>14.3f}   floor {f / g:.0%}, its state"
            f" writes {(w - f) / g:.0%}, the nodes' work {p / g:.0%}, the rest {rest / g:.0%}"
        )
        data[route] = {
            "graph_ms": g * 1e3, "plain_ms": p * 1e3, "floor_ms": f * 1e3, "writes_ms": w * 1e3,
            "graph_over_floor": g / f, "sync_edges_ms": m["sync"] * 1e3,
            "shares": {"floor": f / g, "writes": (w - f) / g, "nodes": p / g, "rest": rest / g},
        }  # fmt: skip
    print(
        "floor: the same shape, nodes that do nothing; writes: those nodes returning the MAI"
        " nodes' updates;\nsync edges: the floor with plain sync routers (LangGraph runs them in"
        " a thread under ainvoke);\nthe rest: graph - writes - plain (the node wrapper, schemas,"
        " the metrics reducer, noise)."
    )
    return data


@contextlib.contextmanager
def _otlp_provider(tmp: Path):
    """A provider batching spans over OTLP/HTTP to a receiver process (None without one)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the receiver is in tests/
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from tests.otlp_receiver import receiver
    except ImportError:
        yield None
        return
    with receiver(tmp) as running:
        provider = TracerProvider()
        exporter = OTLPSpanExporter(endpoint=f"{running.endpoint}/v1/traces")
        provider.add_span_processor(BatchSpanProcessor(exporter))
        try:
            yield provider
        finally:
            provider.shutdown()


async def tracing_cost(runs: int, rounds: int) -> dict:
    """Graph runs with tracing off vs on, interleaved; and the off-path hooks, timed alone.

    Returns the figures (empty without the ``otel`` extra; no OTLP figures without a receiver).
    """
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        print("\ntracing: not measured (pip install 'mai-graph[otel]')")
        return {}
    from mai_graph import GenerationRequest, llm_runs, tracing
    from mai_graph.nodes._common import call, offline

    ctx = MAIContext()
    state = {"question": "Which colour is the square?", "options": ["red", "blue"]}
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    data: dict = {"routes": {}}
    with tempfile.TemporaryDirectory() as tmp, _otlp_provider(Path(tmp)) as otlp:
        print(
            f"\n{'route':<10} {'off ms':>8} {'memory ms':>10} {'otlp ms':>8} "
            f"{'memory/off':>11} {'otlp/off':>9} {'spans/run':>10}"
        )
        for route, (small_table, large_table) in ROUTES.items():
            small, large = ZeroBackend("small", small_table), ZeroBackend("large", large_table)
            graph = create_mai_graph(small, large).compile()
            off, on, wire = [], [], []
            for _ in range(rounds):
                tracing.disable()
                off.append(await timed(lambda g=graph: g.ainvoke(state, context=ctx), runs))
                tracing.enable(provider)
                on.append(await timed(lambda g=graph: g.ainvoke(state, context=ctx), runs))
                if otlp is not None:
                    tracing.enable(otlp)
                    wire.append(await timed(lambda g=graph: g.ainvoke(state, context=ctx), runs))
                tracing.disable()
            provider.force_flush()
            spans = len(exporter.get_finished_spans()) / (runs * rounds)
            exporter.clear()
            a, b = statistics.median(off), statistics.median(on)
            c = statistics.median(wire) if wire else float("nan")
            print(
                f"{route:<10} {a * 1e3:>8.3f} {b * 1e3:>10.3f} {c * 1e3:>8.3f} "
                f"{b / a:>11.2f} {c / a:>9.2f} {spans:>10.1f}"
            )
            row = data["routes"][route] = {
                "off_ms": a * 1e3, "memory_ms": b * 1e3, "memory_over_off": b / a,
                "spans_per_run": spans,
            }  # fmt: skip
            if wire:  # no NaN in a results file: without a receiver, no OTLP figures
                row.update(otlp_ms=c * 1e3, otlp_over_off=c / a)
    # Tracing off: what its hooks cost, one model call's worth (a node span check and a call's).
    tracing.disable()
    request = GenerationRequest(({"role": "user", "content": [{"type": "text", "text": "x"}]},), 1)
    backend = ZeroBackend("small", {"generate": "A"})
    runtime = offline(ctx)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        await backend.generate(request)
    t_bare = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        await call(backend, request, "verify", "small", runtime)
    t_call = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):  # what call() and a node add while tracing is off and no callbacks
        tracing.enabled()
        run = await llm_runs.start_call(None, backend, request, "verify", "small")
        with tracing.call_span(backend, request, "verify", "small") as span:
            tracing.finish_call(span, None, None)  # type: ignore[arg-type]
        await llm_runs.end_call(run, None)  # type: ignore[arg-type]
    hooks = (time.perf_counter() - t0) / n
    print(
        f"tracing off, per model call: the hooks {hooks * 1e6:.2f} us (a call with its record "
        f"and events {t_call * 1e6:.1f} us, the backend alone {t_bare * 1e6:.1f} us)"
    )
    data["off_per_call_us"] = {"hooks": hooks * 1e6, "call": t_call * 1e6, "backend": t_bare * 1e6}
    return data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/overhead.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        rec.data["routes"] = asyncio.run(main(args.runs, args.rounds))
        rec.data["tracing"] = asyncio.run(tracing_cost(args.runs, args.rounds))
