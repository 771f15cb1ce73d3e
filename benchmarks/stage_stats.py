"""What vLLM's per-request statistics cost: the same engine with them on and off, interleaved.

    python benchmarks/stage_stats.py [--rounds 7] [--calls 8] [--tokens 32]

The engines' stage timings (queue, prefill, decode) come from vLLM's request statistics
(``RequestOutput.metrics``), which an engine keeps while it logs statistics: vLLM's default,
and mai-graph's. This starts four engines of the tiny small model on the CPU, two of them with
``disable_log_stats=True`` (no statistics, so no stage timings), and times the same calls
on each, in a rotating order. Prints the median per-call latency of each engine, each
variant's, the ratio, and that only the engines with statistics report stages.
"""

import argparse
import asyncio
import math
import statistics
import sys
import time

from mai_graph import GenerationRequest
from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.backends.vllm import VLLMBackend
from mai_graph.results import RESULTS_HELP, command_line, recording
from mai_graph.tiny.build import build_tiny_pair


async def main(args: argparse.Namespace) -> dict:
    small_dir, _ = build_tiny_pair(args.dir)

    def engine(label: str, stats: bool) -> VLLMBackend:
        extra = {} if stats else {"disable_log_stats": True}
        return VLLMBackend(str(small_dir), name=label, max_model_len=4096, **extra)

    # Four engines started on, off, off, on: an engine started earlier runs a little faster on
    # this machine (measured: 5-10 %), so each variant gets one early and one late start.
    engines = [engine("on-1", True), engine("off-1", False), engine("off-2", False),
               engine("on-2", True)]  # fmt: skip
    await start_backends(*engines)
    text = {"type": "text", "text": "Describe a red square on a grey background in detail."}
    messages = ({"role": "user", "content": [text]},)
    times: dict[str, list[float]] = {b.name: [] for b in engines}
    stages: dict[str, object] = {}
    try:
        for r in range(args.rounds):
            for backend in engines[r % 4 :] + engines[: r % 4]:  # a new order each round
                start = time.perf_counter()
                for _ in range(args.calls):
                    request = GenerationRequest(
                        messages, max_tokens=args.tokens, min_tokens=args.tokens
                    )
                    gen = await backend.generate(request)
                    stages[backend.name[:-2]] = gen.prefill_s
                times[backend.name].append((time.perf_counter() - start) / args.calls)
    finally:
        shutdown_backends(*engines)
    med = {name: statistics.median(t) for name, t in times.items()}
    on = math.sqrt(med["on-1"] * med["on-2"])
    off = math.sqrt(med["off-1"] * med["off-2"])
    print(f"per call ({args.tokens} tokens, {args.calls} calls x {args.rounds} rounds, medians):")
    for name, value in med.items():
        print(f"  {name:<6} {value * 1e3:8.1f} ms")
    print(f"  statistics on  {on * 1e3:8.1f} ms   (stage timings: prefill {stages['on']})")
    print(f"  statistics off {off * 1e3:8.1f} ms   (stage timings: prefill {stages['off']})")
    print(f"  on / off       {on / off:8.3f}   (geometric means of each variant's two engines)")
    return {"engines_ms": {name: value * 1e3 for name, value in med.items()},
            "on_ms": on * 1e3, "off_ms": off * 1e3, "on_over_off": on / off,
            "stages_reported": {"on": stages["on"] is not None,
                                "off": stages["off"] is not None}}  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--dir", default=None, help="where the tiny pair is (built if missing)")
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/stage_stats.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        rec.data.update(asyncio.run(main(args)))
