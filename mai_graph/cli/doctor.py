"""``mai-graph doctor``: the first command on a new machine (a GPU box, or this CPU).

It checks, in order, and ends with a pass / fail table:

1. the device (GPUs with their free memory, or vLLM's CPU build);
2. the installed vLLM against the tested range and every engine internal mai-graph uses;
3. the memory plan of the lineup (default: the trained tiny pair shipped with mai-graph);
4. the engines, started one after the other (start-up time of each), and per engine what it
   asked vLLM for against what vLLM allocated: the memory mode, the share, the KV pool asked
   and the blocks vLLM reported, and whether its workers are spawned (not forked);
5. one run of every route, forced, on the real engines (the route taken must be the forced one),
   timed and measured as ``benchmarks/engines.py`` does, reduced: decode speeds, per-route
   latency against the large model reasoning by itself, concurrent vs sequential runs, the
   share of the shared prefix read from the engines' caches;
6. a clean shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, cast

__all__ = ["register"]

EXIT_OK, EXIT_FAILED = 0, 1


class _Checks:
    def __init__(self) -> None:
        self.rows: list[tuple[str, bool, str]] = []

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.rows.append((name, ok, detail))
        print(f"[{'pass' if ok else 'FAIL'}] {name}: {detail}", flush=True)
        return ok

    def table(self) -> str:
        width = max(len(n) for n, _, _ in self.rows)
        lines = [f"{'check':<{width}}  result  detail", "-" * (width + 30)]
        lines += [f"{n:<{width}}  {'pass' if ok else 'FAIL':<6}  {d}" for n, ok, d in self.rows]
        return "\n".join(lines)

    @property
    def passed(self) -> bool:
        return all(ok for _, ok, _ in self.rows)


def _lineup(args: argparse.Namespace) -> Any:
    from mai_graph.cli.backends import lineup_from_args

    if args.small is None and args.large is None and not args.lineup:
        from mai_graph.pair import trained_pair_paths

        small, large = trained_pair_paths()
        args.small, args.large = str(small), str(large)
    return lineup_from_args(args).checked()


def _refuse_fake(lineup: Any) -> None:
    """The doctor checks models; the fake backend has none (canned answers, no tokenizer)."""
    from mai_graph.errors import ConfigError

    sides = (("small", lineup.small), ("large", lineup.large))
    kinds = [(side, spec.kind(lineup.backend) if spec is not None else lineup.backend)
             for side, spec in sides]  # fmt: skip
    fake = [side for side, kind in kinds if kind == "fake"]
    if fake:
        raise ConfigError(
            f"doctor checks the models on this machine, and {' and '.join(fake)} "
            f"{'is' if len(fake) == 1 else 'are'} the fake backend (canned answers, no model, "
            "engine or tokenizer to check)",
            parameter="--backend",
            value="fake",
            fix="check real models: --backend vllm (the default), transformers or openai with "
            "--small/--large; try the graph without models with `mai-graph run --backend fake`",
        )


def _cmd_doctor(args: argparse.Namespace) -> int:
    from mai_graph.deploy.plan import (
        Workload,
        capped_devices,
        host_device,
        plan_memory,
        probe_devices,
    )
    from mai_graph.errors import ConfigError

    for flag, value, low, high in (("--repeats", args.repeats, 1, 100),
                                   ("--concurrency", args.concurrency, 0, 256),
                                   ("--cot-tokens", args.cot_tokens, 1, 8192)):  # fmt: skip
        if not low <= value <= high:
            raise ConfigError(
                f"{flag} must be in {low}..{high}, got {value}", parameter=flag, value=value
            )
    checks = _Checks()
    lineup = _lineup(args)
    _refuse_fake(lineup)
    members = [(label, spec.kind(lineup.backend)) for label, _, spec in lineup.members()]
    print("lineup: " + ", ".join(f"{label} {kind}" for label, kind in members), flush=True)
    in_process = any(kind == "vllm" for _, kind in members)
    if args.gpu_memory is not None and not in_process:
        raise ConfigError(
            "--gpu-memory sizes the memory plan of in-process vLLM engines, and this lineup "
            "has none",
            parameter="--gpu-memory",
            value=args.gpu_memory,
            fix="drop --gpu-memory, or check --backend vllm models",
        )
    devices = capped_devices(probe_devices(), args.gpu_memory)
    if devices:
        detail = "; ".join(
            f"cuda:{d.index} {d.name} {d.free_bytes / 2**30:.1f}/{d.total_bytes / 2**30:.1f} GiB "
            f"free ({d.source})"
            for d in devices
        )
    else:
        detail = "no GPU: vLLM's CPU build (engines plan a fixed KV cache each)"
    if args.gpu_memory is not None:
        detail += f"; planned with at most {args.gpu_memory} free per card (--gpu-memory)"
    checks.add("device", True, detail)

    if in_process:
        try:
            from mai_graph.backends.vllm import compat

            missing = compat.missing_names()
            warning = compat.check_version()
            import vllm

            checks.add(
                "vllm",
                not missing,
                f"vLLM {vllm.__version__}"
                + (
                    f"; missing internals: {', '.join(missing)}"
                    if missing
                    else "; every engine internal mai-graph uses is there"
                )  # fmt: skip
                + (f"; {warning}" if warning else ""),
            )
        except ImportError as exc:
            checks.add("vllm", False, f"vLLM is not installed ({exc})")
            print(checks.table())
            return EXIT_FAILED
        plan_devices = devices or [host_device()]
        # Hub ids not on this machine yet: their config files are fetched (a few KB), as the
        # engines' start does; the weights are not.
        plan = plan_memory(lineup, plan_devices, Workload.from_context(None), fetch=True)
        print(plan.table(), flush=True)
        ok = checks.add(
            "memory plan",
            plan.fits,
            f"fits, {plan.concurrent_runs} concurrent runs" if plan.fits else str(plan.error()),
        )
        if not ok:
            print(checks.table())
            return EXIT_FAILED
        lineup = plan.apply(lineup)
        kv_per_token = {e.label: e.kv_per_token for e in plan.engines}
    else:
        kv_per_token = {}

    small, large = lineup.build()
    asyncio.run(_run_engines(small, large, checks, args, kv_per_token))
    print()
    print(checks.table())
    print(f"\ndoctor: {'all checks passed' if checks.passed else 'some checks FAILED'}")
    return EXIT_OK if checks.passed else EXIT_FAILED


def _memory_check(role: str, backend: Any, kv_per_token: int | None, checks: _Checks) -> None:
    """What the engine asked vLLM for against what vLLM allocated, and how workers start."""
    report = backend.memory_report()
    tokens = report["kv_tokens"]
    asked = report["kv_cache_bytes"]
    got = tokens * kv_per_token if tokens and kv_per_token else None
    parts = [f"{report['platform']}, mode {report['memory_mode']}"]
    if report["gpu_memory_utilization"] is not None:
        parts.append(f"share {report['gpu_memory_utilization']:.3f}")
    if asked:
        parts.append(f"KV pool asked {asked / 2**30:.2f} GiB")
    if tokens:
        parts.append(
            f"vLLM allocated {report['kv_blocks']:,} blocks x {report['block_size']} = "
            f"{tokens:,} tokens" + (f" ({got / 2**30:.2f} GiB)" if got else "")
        )
    parts.append(f"workers start by {report['start_method']}")
    # A fixed pool is what vLLM allocates, less at most one block per layer group of rounding.
    ok = tokens is not None and report["start_method"] == "spawn"
    if ok and asked and got:
        ok = 0.9 * asked <= got <= asked
    checks.add(f"memory {role}", ok, "; ".join(parts))


async def _run_engines(
    small: Any,
    large: Any,
    checks: _Checks,
    args: argparse.Namespace,
    kv_per_token: dict[str, int] | None = None,
) -> None:
    from mai_graph.backends.base import ManagedBackend, capabilities_of
    from mai_graph.backends.lifecycle import shutdown_backends
    from mai_graph.latency.bench import ROUTES, format_bench, measure
    from mai_graph.tiny.demo import demo_image

    try:
        for role, backend in (("small", small), ("large", large)):
            name = getattr(backend, "name", role)
            if not capabilities_of(backend).managed:
                checks.add(f"start {role}", True, f"{name}: no engine to start (remote)")
                continue
            start = time.perf_counter()
            try:
                await cast(ManagedBackend, backend).start()
            except Exception as exc:  # noqa: BLE001 - reported in the table
                checks.add(f"start {role}", False, f"{name}: {exc}")
                return
            took = time.perf_counter() - start
            checks.add(f"start {role}", True, f"{name}: started and warmed up in {took:.1f} s")
            if hasattr(backend, "memory_report"):
                _memory_check(role, backend, (kv_per_token or {}).get(role), checks)
        with tempfile.TemporaryDirectory() as tmp:
            image = await asyncio.to_thread(demo_image, Path(tmp) / "doctor.png")
            try:
                result = await measure(
                    small, large, image, repeats=args.repeats, concurrency=args.concurrency,
                    short=8, cot=args.cot_tokens,
                )  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - reported in the table
                checks.add("routes", False, f"{type(exc).__name__}: {exc}")
                return
        for route, taken in result.routes.items():
            want = ROUTES[route][3]
            ok = all(t == want for t in taken)
            checks.add(
                f"route {route}",
                ok,
                f"{len(taken)} run(s), route {want}"
                + ("" if ok else f", took {sorted(set(taken))}")
                + (f", {result.latency[route] * 1e3:.0f} ms median" if route in result.latency
                   else ""),
            )  # fmt: skip
        print()
        print(
            format_bench(result, "engines (reduced benchmarks/engines.py)", goals=False), flush=True
        )
        print()
        checks.add(
            "speed",
            True,
            f"MV-exit {result.speedup('MV-exit (agree)'):.1f}x and transfer "
            f"{result.speedup('transfer'):.1f}x faster than large-CoT; {result.concurrency} "
            f"concurrent runs {result.concurrency_ratio:.1f}x sequential throughput "
            "(measured here; reported, not gated)",
        )
        checks.add(
            "prefix cache",
            result.s2_cached_share > 0 and result.transfer_cached_share > 0,
            f"S2 read {result.s2_cached_share:.0%} and the transfer call "
            f"{result.transfer_cached_share:.0%} of their shared prefix from the cache",
        )
    finally:
        start = time.perf_counter()
        try:
            await asyncio.to_thread(shutdown_backends, small, large)
        except Exception as exc:  # noqa: BLE001 - reported in the table
            checks.add("shutdown", False, f"{type(exc).__name__}: {exc}")
        else:
            checks.add("shutdown", True, f"engines stopped in {time.perf_counter() - start:.1f} s")


def register(sub: Any) -> None:
    """Add ``doctor`` to ``mai-graph``'s subcommands."""
    from mai_graph.cli.backends import add_backend_flags

    p = sub.add_parser(
        "doctor",
        help="check this machine end to end: device, vLLM, memory plan, engines, every route",
        description=textwrap.dedent(__doc__ or "").split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_backend_flags(p, default="vllm", shapes=False)
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each route (default 1)")
    p.add_argument("--concurrency", type=int, default=4, help="transfer runs at once (default 4)")
    p.add_argument("--cot-tokens", type=int, default=64, help="forced reasoning length")
    p.set_defaults(func=_cmd_doctor)
