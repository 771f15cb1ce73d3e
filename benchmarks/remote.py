"""Remote serving on loopback: overhead per call and route, the router's affinity, replicas.

    python benchmarks/remote.py [--repeats 7] [--affinity-runs 8] [--concurrency 32]

Two parts, on the tiny local Qwen3-VL pair (random weights; routes forced with constrained
choices, reasoning forced to ``--cot`` tokens, so every variant does the same work):

1. **Remote vs in-process.** One in-process vLLM engine and one ``vllm serve`` of the same
   small model; MAI runs with that model in both roles (so only the transport differs), the
   variants interleaved. Per call (short, CoT, S2, answer) and per route (MV exit, transfer):
   median latency in each, and the remote overhead in ms and as a ratio.
2. **Replicas behind vllm-router.** Two replicas of the small model behind ``vllm-router
   --policy consistent_hash`` and one server of the large model. Runs with the per-run
   affinity key (``X-Session-ID``) interleaved with runs without it: the share of runs whose
   small-model calls stayed on one replica, and the cached share of the block-aligned prefix
   each follow-up call shares with the run's earlier calls (counted with the server's own
   tokenizer), for the CoT and the S2 call. Then ``--concurrency`` concurrent runs through the
   router over two replicas vs a router over one, batches interleaved: runs per second.
   For comparison the same runs go through routers with other policies and no key
   (``round_robin``, ``cache_aware``, and ``consistent_hash`` without a key).

Every number comes from this one run; on 2 CPU cores the engines share the cores, so absolute
speeds vary between runs and machines: compare within a run.
"""

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' server helpers

from mai_graph import MAIContext, arun  # noqa: E402
from mai_graph.backends.lifecycle import shutdown_backends, start_backends  # noqa: E402
from mai_graph.backends.openai import AFFINITY_HEADER, OpenAIBackend, openai_messages  # noqa: E402
from mai_graph.backends.recording import RecordingBackend  # noqa: E402
from mai_graph.backends.render import common_prefix  # noqa: E402
from mai_graph.backends.steered import SteeredBackend  # noqa: E402
from mai_graph.backends.vllm import VLLMBackend  # noqa: E402
from mai_graph.results import RESULTS_HELP, command_line, recording  # noqa: E402
from mai_graph.tiny.build import build_tiny_pair, draw_scene  # noqa: E402
from tests.cluster import finished, metric, replicas, router, tokenize  # noqa: E402

QUESTION = (
    "Look at the picture of coloured shapes on a grey background. Which colour is the large "
    "square in the centre of the image, and how does it compare with the smaller circle?"
)
OPTIONS = ["red", "blue", "green", "yellow"]
BLOCK = 32
ROUTES = {  # route: (small steering, large steering)
    "MV exit (agree)": ({"short": ["A"]}, {"short": ["A"]}),
    "transfer": ({"short": ["A"], "s2": ["C"]}, {"short": ["B"]}),
}


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def picture(i: int, folder) -> str:
    """A distinct image per run (its own pixels, so its own cache entries)."""
    return str(draw_scene(folder / f"picture-{i}.png", i))


def remote(url, model, affinity=True):
    return OpenAIBackend.from_url(url, model, affinity_header=AFFINITY_HEADER if affinity else None)


# -- 1. remote vs in-process ----------------------------------------------------------------


async def overhead(small_dir: Path, folder: Path, repeats: int, cot: int) -> dict:
    logs = folder / "logs-overhead"
    context = MAIContext(cot_max_tokens=cot, cot_min_tokens=cot)
    calls: dict[tuple[str, str], list[float]] = {}
    walls: dict[tuple[str, str], list[float]] = {}
    split = {"client": 0.0, "engine": 0.0, "calls": 0, "last": 0.0}
    # Each engine on its own core: the in-process one on core 0, the server's on core 1.
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0"
    local = VLLMBackend(str(small_dir))
    local.name = "tiny-small"
    await start_backends(local)
    models = [("small", small_dir, "tiny-small", {"VLLM_CPU_OMP_THREADS_BIND": "1"})]
    try:
        with replicas(models, logs) as (server,):
            far = remote(server.url, "tiny-small")
            for backend in (local, far):  # warm both
                steer = ROUTES["transfer"]
                await arun(QUESTION, picture(999, folder), options=OPTIONS, context=context,
                           small=SteeredBackend(backend, steer[0]),
                           large=SteeredBackend(backend, steer[1]))  # fmt: skip
            i = 0
            for _ in range(repeats):
                for route, (s, lg) in ROUTES.items():
                    for variant, backend in (("in-process", local), ("remote", far)):
                        i += 1
                        if variant == "remote":
                            split["last"] = server_time(server.base)
                        start = time.perf_counter()
                        result = await arun(
                            QUESTION, picture(i, folder), options=OPTIONS, context=context,
                            small=SteeredBackend(backend, s), large=SteeredBackend(backend, lg),
                        )  # fmt: skip
                        walls.setdefault((route, variant), []).append(time.perf_counter() - start)
                        if variant == "remote":
                            engine = server_time(server.base)
                            split["client"] += sum(m["latency_s"] for m in result.metrics)
                            split["engine"] += engine - split["last"]
                            split["calls"] += len(result.metrics)
                            split["last"] = engine
                        if route == "transfer":
                            for m in result.metrics:
                                purpose = {"verify": "short", "reason": "cot", "extract": "s2",
                                           "answer": "answer"}[m["node"]]  # fmt: skip
                                calls.setdefault((purpose, variant), []).append(m["latency_s"])
    finally:
        shutdown_backends(local)
    out: dict = {"calls": {}, "routes": {}}
    out["outside_engine_ms_per_call"] = (split["client"] - split["engine"]) / split["calls"] * 1e3
    out["engine_ms_per_call"] = split["engine"] / split["calls"] * 1e3
    for purpose in ("short", "cot", "s2", "answer"):
        a, b = median(calls[(purpose, "in-process")]), median(calls[(purpose, "remote")])
        out["calls"][purpose] = {"in_process_ms": a * 1e3, "remote_ms": b * 1e3,
                                 "overhead_ms": (b - a) * 1e3, "ratio": b / a}  # fmt: skip
    for route in ROUTES:
        a, b = median(walls[(route, "in-process")]), median(walls[(route, "remote")])
        out["routes"][route] = {"in_process_ms": a * 1e3, "remote_ms": b * 1e3,
                                "overhead_ms": (b - a) * 1e3, "ratio": b / a}  # fmt: skip
    return out


# -- 2. replicas behind the router -----------------------------------------------------------


def server_time(base: str) -> float:
    """Seconds the server's engine spent on finished requests, arrival to last token."""
    return metric(base, "vllm:e2e_request_latency_seconds_sum")


def shared_and_cached(calls, base) -> dict:
    """Per follow-up call: (block-aligned shared prefix with the run's earlier calls, cached)."""
    by = {req.purpose: (req, gen) for req, gen in calls}
    tokens = {p: tokenize(base, "tiny-small", openai_messages(by[p][0].messages)) for p in by}
    shared = {
        "cot": common_prefix(tokens["short"], tokens["cot"]),
        "s2": common_prefix(tokens["s2"], tokens["cot"] + list(by["cot"][1].token_ids)),
    }
    return {p: (shared[p] // BLOCK * BLOCK, by[p][1].cached_tokens) for p in shared}


VARIANTS = {  # name: (router policy, send the affinity key)
    "consistent_hash + key": ("consistent_hash", True),
    "consistent_hash, no key": ("consistent_hash", False),
    "round_robin": ("round_robin", False),
    "cache_aware (default)": ("cache_aware", False),
}


async def affinity(replicas_, routers, large_url, folder: Path, runs: int, cot: int) -> dict:
    a, b = replicas_
    context = MAIContext(cot_max_tokens=cot, cot_min_tokens=cot)
    large = SteeredBackend(remote(large_url, "tiny-large"), ROUTES["transfer"][1])
    acc = {
        name: {"runs": 0, "stayed": 0, "cot": [0, 0], "s2": [0, 0], "load": [0, 0]}
        for name in VARIANTS
    }
    i = 0
    for _ in range(runs):
        for name, (_, key) in VARIANTS.items():  # interleaved
            i += 1
            small = RecordingBackend(
                SteeredBackend(remote(routers[name].url, "tiny-small", key), ROUTES["transfer"][0])
            )
            before = finished(a.base), finished(b.base)
            result = await arun(QUESTION, picture(1000 + i, folder), small=small, large=large,
                                options=OPTIONS, context=context)  # fmt: skip
            assert result.route == "transfer", result.route
            landed = [y - x for x, y in zip(before, (finished(a.base), finished(b.base)))]
            s = acc[name]
            s["runs"] += 1
            s["stayed"] += sorted(landed) == [0, 3]
            s["load"] = [s["load"][0] + landed[0], s["load"][1] + landed[1]]
            for purpose, (shared, cached) in shared_and_cached(small.calls, a.base).items():
                s[purpose][0] += shared
                s[purpose][1] += cached
    out = {}
    for name, s in acc.items():
        out[name] = {
            "runs": s["runs"],
            "stayed_on_one_replica": s["stayed"] / s["runs"],
            "cot_cached_share": s["cot"][1] / s["cot"][0],
            "s2_cached_share": s["s2"][1] / s["s2"][0],
            "cached_share": (s["cot"][1] + s["s2"][1]) / (s["cot"][0] + s["s2"][0]),
            "busier_replica_share": max(s["load"]) / sum(s["load"]),
            "shared_tokens_per_run": (s["cot"][0] + s["s2"][0]) / s["runs"],
        }
    return out


async def throughput(fronts, large_url, folder: Path, n: int, rounds: int, cot: int) -> dict:
    context = MAIContext(cot_max_tokens=cot, cot_min_tokens=cot)
    rates: dict[str, list[float]] = {name: [] for name in fronts}
    k = 0
    for _ in range(rounds):
        for name, front in fronts.items():
            small = SteeredBackend(remote(front.url, "tiny-small"), ROUTES["transfer"][0])
            large = SteeredBackend(remote(large_url, "tiny-large"), ROUTES["transfer"][1])
            images = [picture(5000 + k + j, folder) for j in range(n)]
            k += n
            start = time.perf_counter()
            results = await asyncio.gather(
                *(arun(QUESTION, img, small=small, large=large, options=OPTIONS, context=context)
                  for img in images)
            )  # fmt: skip
            rates[name].append(n / (time.perf_counter() - start))
            assert all(r.route == "transfer" for r in results)
    two, one = median(rates["two replicas"]), median(rates["one replica"])
    return {"runs_per_batch": n, "two_replicas_runs_per_s": two, "one_replica_runs_per_s": one,
            "ratio": two / one, "batches": rounds}  # fmt: skip


async def scale_out(small_dir, large_dir, folder, runs, concurrency, rounds, cot) -> dict:
    logs = folder / "logs-router"
    # One core per replica, like one device each: replica a on core 0, b on core 1 (with the
    # large model's server, whose calls are short). A router over a alone uses one core.
    models = [("small-a", small_dir, "tiny-small", {"VLLM_CPU_OMP_THREADS_BIND": "0"}),
              ("small-b", small_dir, "tiny-small", {"VLLM_CPU_OMP_THREADS_BIND": "1"}),
              ("large", large_dir, "tiny-large", {"VLLM_CPU_OMP_THREADS_BIND": "1"})]  # fmt: skip
    with replicas(models, logs) as (a, b, large), contextlib.ExitStack() as stack:
        routers = {
            name: stack.enter_context(router([a, b], logs, name=f"router-{i}", policy=policy))
            for i, (name, (policy, _)) in enumerate(VARIANTS.items())
        }
        single = stack.enter_context(router([a], logs, name="router-one"))
        aff = await affinity((a, b), routers, large.url, folder, runs, cot)
        fronts = {"two replicas": routers["consistent_hash + key"], "one replica": single}
        thr = await throughput(fronts, large.url, folder, concurrency, rounds, cot)
    return {"affinity": aff, "throughput": thr}


def report(res: dict) -> None:
    o = res["overhead"]
    print("\n== remote (vllm serve on loopback) vs in-process vLLM, same model, medians")
    print(f"  {'call':<8} {'in-process':>11} {'remote':>9} {'overhead':>9} {'ratio':>6}")
    for name, v in o["calls"].items():
        print(f"  {name:<8} {v['in_process_ms']:>9.1f}ms {v['remote_ms']:>7.1f}ms "
              f"{v['overhead_ms']:>+7.1f}ms {v['ratio']:>5.2f}x")  # fmt: skip
    print(f"  remote calls: {o['engine_ms_per_call']:.1f} ms in the server's engine (arrival to "
          f"last token), {o['outside_engine_ms_per_call']:.1f} ms outside it (HTTP, API server: "
          f"chat template, image decoding, streaming) per call, mean")  # fmt: skip
    print(f"  {'route':<16} {'in-process':>11} {'remote':>9} {'overhead':>9} {'ratio':>6}")
    for name, v in o["routes"].items():
        print(f"  {name:<16} {v['in_process_ms']:>9.1f}ms {v['remote_ms']:>7.1f}ms "
              f"{v['overhead_ms']:>+7.1f}ms {v['ratio']:>5.2f}x")  # fmt: skip
    a = res["scale_out"]["affinity"]
    print("\n== vllm-router in front of two replicas of the small model: a run's 3 small calls")
    print(f"  {'router':<24} {'runs':>4} {'one replica':>11} {'CoT cached':>10} "
          f"{'S2 cached':>9} {'both':>5} {'busier replica':>14}")  # fmt: skip
    for name, v in a.items():
        print(f"  {name:<24} {v['runs']:>4} {v['stayed_on_one_replica']:>11.0%} "
              f"{v['cot_cached_share']:>10.0%} {v['s2_cached_share']:>9.0%} "
              f"{v['cached_share']:>5.0%} {v['busier_replica_share']:>14.0%}")  # fmt: skip
    print(
        "  (cached: cached tokens over the block-aligned prefix each follow-up call shares "
        "with the run's earlier calls;\n   busier replica: its share of all small calls)"
    )
    t = res["scale_out"]["throughput"]
    print(f"\n== {t['runs_per_batch']} concurrent transfer runs through the router "
          f"(replica a on core 0, b on core 1), median of {t['batches']} batches each")  # fmt: skip
    print(f"  two replicas {t['two_replicas_runs_per_s']:.2f} runs/s, one replica "
          f"{t['one_replica_runs_per_s']:.2f} runs/s: {t['ratio']:.2f}x")  # fmt: skip


async def main(args) -> dict:
    small_dir, large_dir = build_tiny_pair(args.dir)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        res = {"overhead": await overhead(small_dir, folder, args.repeats, args.cot)}
        res["scale_out"] = await scale_out(small_dir, large_dir, folder, args.affinity_runs,
                                           args.concurrency, args.rounds, args.cot)  # fmt: skip
    res["settings"] = dataclasses.asdict(Settings(**vars(args)))
    return res


@dataclasses.dataclass
class Settings:
    dir: str | None
    repeats: int
    affinity_runs: int
    concurrency: int
    rounds: int
    cot: int
    json: str | None
    results: str | None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=None, help="tiny pair folder (default: cache)")
    parser.add_argument("--repeats", type=int, default=7, help="runs per route and variant")
    parser.add_argument("--affinity-runs", type=int, default=8, help="runs per router variant")
    parser.add_argument("--concurrency", type=int, default=32, help="runs per batch")
    parser.add_argument("--rounds", type=int, default=3, help="batches per replica count")
    parser.add_argument("--cot", type=int, default=64, help="forced reasoning tokens")
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/remote.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        results = asyncio.run(main(args))
        report(results)
        rec.data.update(overhead=results["overhead"], scale_out=results["scale_out"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
