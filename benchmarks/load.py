"""Load: waves of concurrent graph runs on fake backends and on the tiny vLLM pair.

Each wave starts N graph runs at once (half end at verification, half go through reasoning,
S2 and transfer, all with an image) and waits for all of them. Per wave it prints failures
(goal: 0), latency percentiles of the runs, throughput, and resident memory after the wave:
of this process, and of the engine processes for the vLLM part (goal: no growth beyond noise
after the first wave). Then it checks that the engines hold no request and that shutting them
down leaves no engine process behind.

    python benchmarks/load.py [--waves 5] [--fake 200] [--engine 32] [--no-engine]

Exits 1 if any run failed or hung, memory grew by more than ``--max-growth-mb`` from the end
of the first wave to the end of the last, or an engine process outlived shutdown. The fakes
answer after ``--latency`` seconds (asyncio.sleep); their request records are cleared after
each wave (they exist for tests and would otherwise grow). The vLLM pair has random weights:
routes are forced with constrained choices; prefill, decode and caching are real.
"""

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from pathlib import Path

import psutil

from mai_graph import MAI, MAIContext
from mai_graph.backends.fake import ScriptedBackend
from mai_graph.backends.steered import SteeredBackend
from mai_graph.results import RESULTS_HELP, command_line, recording
from mai_graph.tiny.build import draw_scene

QUESTION = "Which colour is the large square in the centre of the image?"
OPTIONS = ["red", "blue", "green", "yellow"]
REASONING = "The square in the middle is red and the circles are blue, so the answer is A. " * 4


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    return total / 1e6


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def wave(n: int, pairs: list[tuple[object, object]], image: Path, ctx: MAIContext,
               timeout: float) -> tuple[list[float], list[str], float]:  # fmt: skip
    """N runs at once, alternating over ``pairs``; returns latencies, failures, wall time.

    Each pair's graph is compiled once (a service keeps one :class:`MAI` per lineup).
    """
    owners = [MAI(small, large) for small, large in pairs]

    async def one(i: int) -> float:
        start = time.perf_counter()
        await asyncio.wait_for(
            owners[i % len(owners)].arun(QUESTION, str(image), options=OPTIONS, context=ctx),
            timeout,
        )
        return time.perf_counter() - start

    start = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    wall = time.perf_counter() - start
    latencies = [r for r in results if isinstance(r, float)]
    failures = [f"{type(r).__name__}: {r}"[:200] for r in results if not isinstance(r, float)]
    return latencies, failures, wall


def report(name: str, rows: list[dict], max_growth_mb: float, data: dict) -> bool:
    """Print the waves (figures into ``data``); True if no run failed and memory stayed flat."""
    engines = "engines" in rows[0]
    waves = data.setdefault("waves", [])
    print(f"\n{name}")
    print("  wave  runs  fail   p50 ms   p90 ms   p99 ms   max ms  runs/s   RSS MB"
          + ("  engines MB" if engines else ""))  # fmt: skip
    for i, r in enumerate(rows, 1):
        lat = [x * 1000 for x in r["latencies"]] or [float("nan")]
        print(
            f"  {i:>4} {r['n']:>5} {len(r['failures']):>5} {pct(lat, 50):>8.0f} "
            f"{pct(lat, 90):>8.0f} {pct(lat, 99):>8.0f} {max(lat):>8.0f} "
            f"{r['n'] / r['wall']:>7.1f} {r['rss']:>8.1f}"
            + (f" {r['engines']:>11.1f}" if engines else "")
        )
        figures = {"runs": r["n"], "failures": len(r["failures"]), "p50_ms": pct(lat, 50),
                   "p90_ms": pct(lat, 90), "p99_ms": pct(lat, 99), "max_ms": max(lat),
                   "runs_per_s": r["n"] / r["wall"], "rss_mb": r["rss"]}  # fmt: skip
        if engines:
            figures["engines_mb"] = r["engines"]
        waves.append(figures)
        for failure in r["failures"][:3]:
            print(f"        {failure}")
    failures = sum(len(r["failures"]) for r in rows)
    growth = rows[-1]["rss"] - rows[0]["rss"] if len(rows) > 1 else 0.0
    print(f"  failures: {failures} of {sum(r['n'] for r in rows)} runs")
    data.update(failures=failures, runs=sum(r["n"] for r in rows), rss_growth_mb=growth)
    print(f"  this process's memory, end of wave 1 -> last: {growth:+.1f} MB "
          f"(bound {max_growth_mb:g} MB)")  # fmt: skip
    if engines and len(rows) > 1:
        steps = [b["engines"] - a["engines"] for a, b in zip(rows, rows[1:])]
        print(f"  engine processes' memory, per wave after the first: "
              f"{', '.join(f'{d:+.1f}' for d in steps)} MB")  # fmt: skip
        data["engines_growth_mb"] = steps
    return failures == 0 and growth <= max_growth_mb


async def fake_part(args: argparse.Namespace, image: Path, data: dict) -> bool:
    def pair(short_small: str, short_large: str) -> tuple[ScriptedBackend, ScriptedBackend]:
        small = ScriptedBackend({"short": short_small, "cot": REASONING, "s2": "C"},
                                name="fake-small", latency=args.latency)  # fmt: skip
        large = ScriptedBackend({"short": short_large, "answer": "A"}, name="fake-large",
                                latency=args.latency)  # fmt: skip
        return small, large

    pairs = [pair("A", "A"), pair("A", "B")]  # agree, transfer
    ctx = MAIContext(cot_max_tokens=64)
    me = [psutil.Process().pid]
    rows = []
    for _ in range(args.waves):
        latencies, failures, wall = await wave(args.fake, pairs, image, ctx, args.timeout)
        for backend in (b for p in pairs for b in p):
            backend.requests.clear()
            assert backend.in_flight == 0
        gc.collect()
        rows.append(dict(n=args.fake, latencies=latencies, failures=failures, wall=wall,
                         rss=rss_mb(me)))  # fmt: skip
    return report(f"fakes: {args.fake} concurrent runs per wave, {args.latency * 1000:.0f} ms "
                  "per call; RSS of this process", rows, args.max_growth_mb, data)  # fmt: skip


async def engine_part(args: argparse.Namespace, image: Path, data: dict) -> bool:
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.tiny.build import tiny_backends

    small, large = tiny_backends("vllm", args.tiny_dir)
    start = time.perf_counter()
    ok = True
    try:
        await start_backends(small, large)
        data["start_s"] = time.perf_counter() - start
        print(f"\nstarted the tiny vLLM pair in {data['start_s']:.0f} s")
        pairs = [
            (SteeredBackend(small, {"short": ["A"]}), SteeredBackend(large, {"short": ["A"]})),
            (SteeredBackend(small, {"short": ["A"], "s2": ["C"]}),
             SteeredBackend(large, {"short": ["B"]})),
        ]  # fmt: skip
        ctx = MAIContext(cot_max_tokens=args.cot_tokens, cot_min_tokens=args.cot_tokens,
                         short_max_tokens=4)  # fmt: skip
        me = [psutil.Process().pid]
        engine_pids = [*small.engine_processes(), *large.engine_processes()]
        rows = []
        for _ in range(args.waves):
            latencies, failures, wall = await wave(args.engine, pairs, image, ctx, args.timeout)
            gc.collect()
            rows.append(dict(n=args.engine, latencies=latencies, failures=failures, wall=wall,
                             rss=rss_mb(me), engines=rss_mb(engine_pids)))  # fmt: skip
        ok = report(f"tiny vLLM pair: {args.engine} concurrent runs per wave, "
                    f"{args.cot_tokens}-token reasoning; RSS of this process and of the "
                    f"{len(engine_pids)} engine processes", rows, args.max_growth_mb,
                    data)  # fmt: skip
        busy = [b.name for b in (small, large) if b.running_requests() or not await b.engine_idle()]
        print(f"  requests left in the engines after the waves: {busy or 'none'}")
        data["busy_engines"] = busy
        ok = ok and not busy
    finally:
        start = time.perf_counter()
        await asyncio.to_thread(shutdown_backends, small, large)
        took = time.perf_counter() - start
    left = [p for p in engine_pids if psutil.pid_exists(p)
            and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
    print(f"  shutdown: {took:.1f} s, engine processes left: {len(left)}")
    data.update(shutdown_s=took, engine_processes_left=len(left))
    return ok and not left


async def main(args: argparse.Namespace, data: dict) -> int:
    """Run the parts; their figures go into ``data`` (``fakes``, ``engines``)."""
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        image = draw_scene(Path(tmp) / "scene.png")
        if args.fake:
            ok = await fake_part(args, image, data.setdefault("fakes", {})) and ok
        if args.engine and not args.no_engine:
            ok = await engine_part(args, image, data.setdefault("engines", {})) and ok
    print("\nresult:", "ok" if ok else "FAILED (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--fake", type=int, default=200, help="concurrent runs on fakes (0: skip)")
    parser.add_argument("--engine", type=int, default=32, help="concurrent runs on vLLM (0: skip)")
    parser.add_argument("--no-engine", action="store_true", help="fakes only")
    parser.add_argument("--latency", type=float, default=0.02, help="fake call latency, s")
    parser.add_argument("--cot-tokens", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=300.0, help="per run, s (a hang fails)")
    parser.add_argument("--max-growth-mb", type=float, default=64.0)
    parser.add_argument("--tiny-dir", default=None, help="the tiny pair (default: cache)")
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/load.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        code = asyncio.run(main(args, rec.data))
        rec.ok = code == 0  # a failed run measured nothing: no results file
    sys.exit(code)
