"""The latency model against measurement: per-route predicted vs measured latency.

    python benchmarks/latency_model.py [--rounds 7] [--cot-tokens 300] [--dir TINY]

Starts the tiny local Qwen3-VL pair (random weights) on vLLM and profiles it as `mai-graph
profile` does, with ``--rounds`` rounds; after each profile round it runs every route once, in
a shuffled order (so the profile and the routes see the same machine load, which drifts on a
shared machine), each run on a new image and question so no cache has seen it, routes forced
by steering the answers' choices and the reasoning forced to exactly ``--cot-tokens`` tokens.

Prints, per route, the model's prediction (labelled modelled) and
the measured median, for the whole run's wall time and for the critical path of model time
(what `mai-graph eval` reports), with the relative error and whether it is within 15%.
"""

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.latency.profile import Fresh, format_model, fresh_run, profile_pair
from mai_graph.results import RESULTS_HELP, command_line, recording
from mai_graph.tiny.build import tiny_backends

ROUTES = ("agree", "extract_agree", "transfer", "small", "large", "small_cot", "large_cot")
TOLERANCE = 0.15


def critical_path(metrics, sparsify_s):
    verify = [m["latency_s"] for m in metrics if m["node"] == "verify"]
    rest = sum(m["latency_s"] for m in metrics if m["node"] != "verify")
    return (max(verify) if verify else 0.0) + rest + sparsify_s


class _Call:
    def __init__(self, m):
        self.role, self.node = m["role"], m["node"]
        self.prompt_tokens, self.cached_tokens = m["prompt_tokens"], m["cached_tokens"]
        self.generated_tokens = m["generated_tokens"]


async def main(args) -> dict:
    small, large = tiny_backends("vllm", args.dir)
    t0 = time.perf_counter()
    await start_backends(small, large)
    print(f"engines started in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            return await run(args, small, large, Path(tmp))
    finally:
        shutdown_backends(small, large)


async def run(args, small, large, folder) -> dict:
    def say(line):
        print(line, file=sys.stderr, flush=True)

    fresh = Fresh(seed=2, size=(320, 256))
    order = random.Random(3)
    walls = {r: [] for r in ROUTES}
    paths = {r: [] for r in ROUTES}
    from_calls = {r: [] for r in ROUTES}

    async def route_round(i):
        say(f"route round {i + 1}/{args.rounds} ...")
        routes = list(ROUTES)
        order.shuffle(routes)
        for route in routes:
            result = await fresh_run(small, large, fresh, route, folder, cot_tokens=args.cot_tokens)
            assert result.route == route, (route, result.route)
            walls[route].append(result.wall_s)
            scoring = (result.sparsification or {}).get("scoring_s", 0.0)
            paths[route].append(critical_path(result.metrics, scoring))
            from_calls[route].append([_Call(m) for m in result.metrics])

    t0 = time.perf_counter()
    # Profile rounds and route rounds alternate, so both see the same machine load.
    model = await profile_pair(
        small, large, rounds=args.rounds, seed=1, say=say, between_rounds=route_round
    )
    say(f"profiled and measured in {time.perf_counter() - t0:.0f} s")
    workload = model.workload.model_copy(update={"cot_tokens": args.cot_tokens})
    if args.out:
        model.save(args.out)
    print(format_model(model, workload, [0.5, 0.7, 0.9], 0.0))
    print()
    print(
        f"tiny Qwen3-VL pair on vLLM (CPU), reasoning {args.cot_tokens} tokens, short answers "
        f"steered; medians of {args.rounds} interleaved runs per route, each on a new image"
    )
    print()
    head = (
        f"{'route':<14} {'wall: modelled':>14} {'measured':>9} {'error':>7}   "
        f"{'critical path: modelled':>23} {'measured':>9} {'error':>7}  {'from calls':>10}"
    )
    print(head)
    print("-" * len(head))
    within = []
    data: dict = {"cot_tokens": args.cot_tokens, "rounds": args.rounds, "routes": {}}
    for route in ROUTES:
        pw = model.predict_route(route, workload)
        pc = model.predict_route(route, workload, wall=False)
        mw, mc = statistics.median(walls[route]), statistics.median(paths[route])
        fc = statistics.median(model.predict_calls(c) for c in from_calls[route])
        ew, ec = (pw - mw) / mw, (pc - mc) / mc
        ok = abs(ew) <= TOLERANCE and abs(ec) <= TOLERANCE
        within.append(ok)
        data["routes"][route] = {
            "wall_modelled_ms": pw * 1e3, "wall_measured_ms": mw * 1e3, "wall_error": ew,
            "path_modelled_ms": pc * 1e3, "path_measured_ms": mc * 1e3, "path_error": ec,
            "from_calls_ms": fc * 1e3, "within_15": ok,
        }  # fmt: skip
        print(
            f"{route:<14} {pw * 1e3:>11.0f} ms {mw * 1e3:>6.0f} ms {ew:>+7.1%}   "
            f"{pc * 1e3:>20.0f} ms {mc * 1e3:>6.0f} ms {ec:>+7.1%}  {fc * 1e3:>7.0f} ms"
            f"  {'within 15%' if ok else 'OUTSIDE 15%'}"
        )
    print()
    print(
        "modelled: the latency model's prediction for the profiled workload at this reasoning "
        "length; measured: medians; from calls: the model applied to each run's own recorded "
        "token counts (critical path, as `eval --latency-model` predicts)"
    )
    spread = {r: (min(walls[r]), max(walls[r])) for r in ROUTES}
    print(
        "measured wall range (min-max ms): "
        + ", ".join(f"{r} {a * 1e3:.0f}-{b * 1e3:.0f}" for r, (a, b) in spread.items())
    )
    unsteady = [r for r, (a, b) in spread.items() if b > 2 * a]
    if unsteady:
        print(
            f"load was unsteady during this run (slowest run over twice the fastest: "
            f"{', '.join(unsteady)}): the medians are unreliable, run again on a quieter machine"
        )
    verdict = "met" if all(within) else "NOT met"
    print(f"goal every route within 15% (wall and critical path): {verdict}")
    data["goal_met"] = all(within)
    data["unsteady"] = unsteady
    shapes = workload.calls("transfer")
    print("transfer route calls (modelled):")
    for c in shapes:
        print(f"  {c.node:<8} {c.role:<6} uncached {c.uncached:>4} cached {c.cached:>4} "
              f"generated {c.generated:>4} -> {model.call_time(c) * 1e3:6.1f} ms")  # fmt: skip
    return data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cot-tokens", type=int, default=300)
    parser.add_argument("--dir", default=None, help="tiny pair folder (default: cache)")
    parser.add_argument("--out", help="save the profiled model as JSON")
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/latency_model.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        rec.data.update(asyncio.run(main(args)))
