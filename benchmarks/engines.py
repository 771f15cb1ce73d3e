"""MAI on two real engines: decode speeds, per-route latency, speedups, concurrency, caching.

    python benchmarks/engines.py [--backend vllm|transformers] [--repeats 5] [--concurrency 32]

Runs on the tiny local Qwen3-VL pair (random weights) with forced output lengths: every short
answer decodes exactly 8 tokens, the reasoning exactly 300. Routes are forced by replacing the
*text* of a generation after the engine produced it (the engine still does all the work), so
each route's timing is real. Prints medians over ``--repeats`` runs, the speedup of each MAI
route over the large model reasoning by itself (large-CoT), the throughput of N concurrent
graph runs vs N sequential ones, and the share of the shared prompt prefix that S2 and the
large model's transfer call read from the engine's cache. The measuring code is
``mai_graph.latency.bench`` (``mai-graph doctor`` runs it reduced).
"""

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.latency.bench import BenchResult, format_bench, measure
from mai_graph.results import RESULTS_HELP, command_line, recording
from mai_graph.tiny.build import tiny_backends
from mai_graph.tiny.demo import demo_image


def figures(r: BenchResult) -> dict:
    """The headline figures as numbers (ms, tok/s, ratios, shares)."""
    out: dict = {
        "latency_ms": {route: wall * 1e3 for route, wall in r.latency.items()},
        "speedup_vs_large_cot": {route: r.speedup(route) for route in r.latency},
        "decode_tok_s": dict(r.decode_tok_s),
        "s2_cached_share": r.s2_cached_share,
        "transfer_cached_share": r.transfer_cached_share,
    }
    if r.concurrency:
        out["concurrency"] = {
            "runs": r.concurrency,
            "sequential_s": r.sequential_s,
            "concurrent_s": r.concurrent_s,
            "ratio": r.concurrency_ratio,
        }
    return out


async def main(args) -> dict:
    if args.backend == "transformers":
        import torch

        torch.set_num_threads(1)
    small, large = tiny_backends(args.backend, args.dir)
    await start_backends(small, large)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            image = demo_image(Path(tmp) / "bench.png")
            result = await measure(small, large, image, repeats=args.repeats,
                                   concurrency=args.concurrency, short=8, cot=300)  # fmt: skip
    finally:
        shutdown_backends(small, large)
    print(format_bench(result, f"backend: {args.backend}; tiny Qwen3-VL pair (random weights)"))
    return figures(result)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vllm", choices=["vllm", "transformers"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--dir", default=None, help="tiny pair folder (default: cache)")
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/engines.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        rec.data.update(asyncio.run(main(args)))
