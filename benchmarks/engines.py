"""MAI on two real engines: decode speeds, per-route latency, speedups, concurrency, caching.

    python benchmarks/engines.py [--backend vllm|transformers] [--repeats 5] [--concurrency 32]

Runs on the tiny local Qwen3-VL pair (random weights) with forced output lengths: every short
answer decodes exactly 8 tokens, the reasoning exactly 300. Routes are forced by replacing the
*text* of a generation after the engine produced it (the engine still does all the work), so
each route's timing is real. Prints medians over ``--repeats`` runs, the speedup of each MAI
route over the large model reasoning by itself (large-CoT), the throughput of N concurrent
graph runs vs N sequential ones, and the share of the shared prompt prefix that S2 and the
large model's transfer call read from the engine's cache.
"""

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
from pathlib import Path

from forced import Forced  # benchmarks/forced.py (the script's folder is on the path)

from mai_graph import MAIContext, arun
from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.backends.render import common_prefix, render
from mai_graph.demo import DEMO_OPTIONS, DEMO_QUESTION, demo_image
from mai_graph.testing import tiny_backends

SHORT, COT = 8, 300
LENGTHS = {"short": SHORT, "cot": COT, "s2": SHORT, "answer": SHORT}
ROUTES = {  # route: (small texts, large texts, context settings)
    "MV-exit (agree)": ({"short": "A"}, {"short": "A"}, {}),
    "S2-exit (extract_agree)": ({"short": "A", "s2": "B"}, {"short": "B"}, {}),
    "transfer": ({"short": "A", "s2": "C"}, {"short": "B", "answer": "D"}, {}),
    "MV-exit, speculative CoT": ({"short": "A"}, {"short": "A"}, {"speculative_cot": True}),
    "transfer, speculative CoT": (
        {"short": "A", "s2": "C"},
        {"short": "B", "answer": "D"},
        {"speculative_cot": True},
    ),
    "large-CoT (baseline)": ({}, {"s2": "D"}, {"policy": "large_cot"}),
}


_cases = itertools.count()


async def route_once(small, large, image, route):
    """One run on a question no earlier run asked: caches hold only what this run shares."""
    question = f"{DEMO_QUESTION} (case {next(_cases)})"
    small_text, large_text, settings = ROUTES[route]
    fs, fl = Forced(small, small_text, LENGTHS), Forced(large, large_text, LENGTHS)
    ctx = MAIContext(cot_max_tokens=COT, short_max_tokens=SHORT, s2_max_tokens=SHORT, **settings)
    result = await arun(question, str(image), options=DEMO_OPTIONS, small=fs, large=fl, context=ctx)
    return result, fs, fl


def shared(tokenizer, a, b):
    """Prompt ids two requests share (image placeholders unexpanded)."""
    return common_prefix(
        render(tokenizer, a.messages, set()).token_ids,
        render(tokenizer, b.messages, set()).token_ids,
    )


def decode_speed(gen):
    return (gen.generated_tokens - 1) / max(gen.latency_s - (gen.ttft_s or 0.0), 1e-9)


async def main(args):
    if args.backend == "transformers":
        import torch

        torch.set_num_threads(1)
    small, large = tiny_backends(args.backend, args.dir)
    await start_backends(small, large)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            image = demo_image(Path(tmp) / "bench.png")
            await run_benchmark(args, small, large, image)
    finally:
        shutdown_backends(small, large)


async def run_benchmark(args, small, large, image):
    for route in ROUTES:  # warm-up: first-use costs are not what we measure
        await route_once(small, large, image, route)
    walls = {route: [] for route in ROUTES}
    speeds = {"small": [], "large": []}
    s2_share, transfer_share = [], []
    for _ in range(args.repeats):
        for route in ROUTES:
            result, fs, fl = await route_once(small, large, image, route)
            walls[route].append(result.wall_s)
            for role, forced in (("small", fs), ("large", fl)):
                for req, gen in forced.calls:
                    if req.purpose == "cot":
                        speeds[role].append(decode_speed(gen))
            if route == "transfer":
                (cot_req, cot_gen), (s2_req, s2_gen) = [
                    c for c in fs.calls if c[0].purpose in ("cot", "s2")
                ]
                image_extra = cot_gen.prompt_tokens - len(
                    render(small.tokenizer, cot_req.messages, set()).token_ids
                )
                s2_prefix = shared(small.tokenizer, cot_req, s2_req) + image_extra + COT - 1
                s2_share.append((s2_gen.cached_tokens or 0) / s2_prefix)
                (short_req, _), (ans_req, ans_gen) = [
                    c for c in fl.calls if c[0].purpose in ("short", "answer")
                ]
                prefix = shared(large.tokenizer, short_req, ans_req) + image_extra
                transfer_share.append((ans_gen.cached_tokens or 0) / prefix)

    med = {route: statistics.median(v) for route, v in walls.items()}
    base = med["large-CoT (baseline)"]
    print(f"backend: {args.backend}; tiny Qwen3-VL pair (random weights); short = {SHORT} tokens, "
          f"CoT = {COT} tokens; medians of {args.repeats} runs\n")  # fmt: skip
    vs, vl = statistics.median(speeds["small"]), statistics.median(speeds["large"])
    print(f"decode speed   small {vs:8.1f} tok/s   large {vl:8.1f} tok/s   ratio {vs / vl:.1f}x\n")
    print(f"{'route':<26} {'latency ms':>11} {'speedup vs large-CoT':>21}")
    for route, wall in med.items():
        print(f"{route:<26} {wall * 1e3:>11.0f} {base / wall:>20.1f}x")
    goal = "met" if base / med["MV-exit (agree)"] >= 8 else "NOT met"
    print(f"goal MV-exit >= 8x faster than large-CoT: {goal}\n")

    n = args.concurrency
    start = time.perf_counter()
    for _ in range(n):
        await route_once(small, large, image, "transfer")
    sequential = time.perf_counter() - start
    start = time.perf_counter()
    results = await asyncio.gather(*(route_once(small, large, image, "transfer") for _ in range(n)))
    concurrent = time.perf_counter() - start
    assert all(r.route == "transfer" for r, _, _ in results)
    ratio = sequential / concurrent
    print(
        f"{n} transfer runs   sequential {sequential:6.1f} s ({n / sequential:5.2f} runs/s)   "
        f"concurrent {concurrent:6.1f} s ({n / concurrent:5.2f} runs/s)   {ratio:.1f}x"
    )
    print(f"goal concurrent >= 3x sequential: {'met' if ratio >= 3 else 'NOT met'}\n")

    s2, tr = statistics.median(s2_share), statistics.median(transfer_share)
    print(f"cached share of the shared prefix   S2 {s2:6.1%}   transfer {tr:6.1%}")
    print(f"goal cached share >= 90%: {'met' if min(s2, tr) >= 0.9 else 'NOT met'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vllm", choices=["vllm", "transformers"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--dir", default=None, help="tiny pair folder (default: cache)")
    asyncio.run(main(parser.parse_args()))
