"""``mai-graph profile``: measure a model pair's engines and fit the latency model.

:func:`profile_pair` measures, on running engines, in interleaved rounds:

1. each engine alone, through its backend, at a few prompt lengths (fresh prompts: a unique
   first line defeats the prefix cache), output lengths forced with ``min_tokens =
   max_tokens``, with and without a fresh image and constrained choices, and the real
   short-answer request on a new image; calls are made as the graph makes them (streamed,
   with logprobs);
2. both engines' verification calls alone and at once (the contention of mutual verification);
3. real MAI runs on forced routes (``agree`` and ``transfer``, fresh image and question each):
   the prompt sizes of every call and the graph's own overhead.

It then fits :class:`~mai_graph.latency.model.LatencyModel`; :func:`measure_pair` also starts and
stops the engines, :func:`format_model` and :func:`predictions` show what the model predicts.
:mod:`mai_graph.cli.profile` is the command.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

from mai_graph.backends.base import (
    GenerationRequest,
    StreamingBackend,
    VLMBackend,
    capabilities_of,
)
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError
from mai_graph.latency.model import (
    MODEL_ROUTES,
    CallSample,
    CallTokens,
    LatencyModel,
    Workload,
    describe,
    fit_engine,
    fit_overlap,
)

__all__ = [
    "Fresh",
    "format_model",
    "forced_run",
    "fresh_run",
    "measure_pair",
    "predictions",
    "profile_pair",
]

_WORDS = (
    "the image shows a red square on a white background with two circles and three lines "
    "so the answer is B because the square is larger than the circles"
).split()
_LETTERS = ("A", "B", "C", "D")
_QUESTION = "Which colour is the largest shape in the picture?"
_OPTIONS = {"A": "red", "B": "blue", "C": "green", "D": "yellow"}

# (group, words of text, generated tokens, image, constrained)
_POINTS: tuple[tuple[str, int, int, bool, bool], ...] = (
    ("text-40/1", 40, 1, False, False),
    ("text-40/16", 40, 16, False, False),
    ("text-40/64", 40, 64, False, False),
    ("text-250/1", 250, 1, False, False),
    ("text-250/32", 250, 32, False, False),
    ("text-700/1", 700, 1, False, False),
    ("text-700/32", 700, 32, False, False),
    ("image/1", 20, 1, True, False),
    ("image/8", 20, 8, True, False),
    ("image/choice", 20, 0, True, True),
    ("text-250/choice", 250, 0, False, True),
    ("verify", 0, 0, True, True),  # the real short-answer request on a new image
)


class Fresh:
    """Fresh images and first lines: nothing a call sends was seen by the engine before.

    Args:
        seed: Seed of the images and nonces.
        size: Image size (width, height).
    """

    def __init__(self, seed: int, size: tuple[int, int]) -> None:
        self.rng = random.Random(seed)
        self.size = size
        self.count = 0

    def nonce(self) -> str:
        """A line no earlier prompt started with."""
        self.count += 1
        return f"Request {self.count}-{self.rng.randrange(10**9)}."

    def image(self) -> Any:
        """A new random picture (an ``ImageRef``)."""
        from PIL import Image, ImageDraw

        from mai_graph.inputs.sources import image_ref

        rng = self.rng
        img = Image.new("RGB", self.size, tuple(rng.randrange(256) for _ in range(3)))
        draw = ImageDraw.Draw(img)
        w, h = self.size
        for _ in range(6):
            x, y = rng.randrange(w), rng.randrange(h)
            r = rng.randrange(8, max(9, min(w, h) // 4))
            colour = tuple(rng.randrange(256) for _ in range(3))
            draw.ellipse((x - r, y - r, x + r, y + r), fill=colour)
        return image_ref(img)


def _request(fresh: Fresh, words: int, generated: int, image: bool, constrained: bool) -> Any:
    text = " ".join(_WORDS[i % len(_WORDS)] for i in range(words))
    parts: list[Any] = []
    if image:
        parts.append({"type": "image", "image": fresh.image()})
    parts.append({"type": "text", "text": f"{_QUESTION}\n{text}"})
    messages: Any = (
        {"role": "system", "content": [{"type": "text", "text": fresh.nonce()}]},
        {"role": "user", "content": parts},
    )
    # Like every call of the graph: the generated tokens' logprobs come along.
    if constrained:
        return GenerationRequest(
            messages, max_tokens=16, choices=_LETTERS, logprobs=0, purpose="short"
        )
    return GenerationRequest(messages, max_tokens=generated, min_tokens=generated, logprobs=0)


def _ignore(_: str) -> None:
    return None


async def _generate(backend: VLMBackend, request: GenerationRequest) -> Any:
    """A call as the graph's nodes make it: streamed when the backend streams."""
    if capabilities_of(backend).stream:
        return await cast(StreamingBackend, backend).generate_stream(request, _ignore)
    return await backend.generate(request)


async def _timed(backend: VLMBackend, request: GenerationRequest) -> tuple[Any, float]:
    start = time.perf_counter()
    gen = await _generate(backend, request)
    return gen, time.perf_counter() - start


def _sample(role: str, group: str, gen: Any, wall: float, image: bool, con: bool) -> CallSample:
    cached = gen.cached_tokens or 0
    shape = CallTokens(
        role,  # type: ignore[arg-type]
        "profile",
        max(gen.prompt_tokens - cached, 0),
        cached,
        gen.generated_tokens,
        image,
        con,
    )
    return CallSample(shape, engine_seconds(gen), wall, group=group)


def engine_seconds(gen: Any) -> float:
    """A call's engine time net of queueing: what its shape costs, whatever else was running.

    Where the backend reports the engine's own stages (``queue_s``), the wait before the
    engine scheduled the call is taken out of its latency; otherwise the latency as measured.

    >>> from mai_graph.backends.base import Generation
    >>> engine_seconds(Generation("x", "m", 3, 1, 0.5, queue_s=0.2))
    0.3
    """
    queued = getattr(gen, "queue_s", None) or 0.0
    return max(float(gen.latency_s) - queued, 0.0)


def _verify_request(fresh: Fresh, ctx: MAIContext, image: Any) -> GenerationRequest:
    from mai_graph.calls import Question, short_request

    q = Question(
        question=f"{fresh.nonce()} {_QUESTION}", image=image, options=dict(_OPTIONS), kind="choice"
    )
    return short_request(q, ctx)


_STEER: dict[str, tuple[dict[str, list[str]], dict[str, list[str]], str]] = {
    "agree": ({"short": ["A"]}, {"short": ["A"]}, "mai"),
    "extract_agree": ({"short": ["A"], "s2": ["B"]}, {"short": ["B"]}, "mai"),
    "transfer": ({"short": ["A"], "s2": ["C"]}, {"short": ["B"], "answer": ["D"]}, "mai"),
    "small": ({}, {}, "small"),
    "large": ({}, {}, "large"),
    "small_cot": ({}, {}, "small_cot"),
    "large_cot": ({}, {}, "large_cot"),
}


async def forced_run(
    small: VLMBackend,
    large: VLMBackend,
    route: str,
    *,
    image: Path,
    question: str,
    cot_tokens: int = 32,
) -> Any:
    """One MAI run forced onto ``route`` (choices steered, reasoning exactly ``cot_tokens``).

    The engines do all the work (prefill, decode, caching); only the strings the answers may
    take are narrowed. Give a new image and question each time for a run no cache has seen.
    """
    from mai_graph.api import arun
    from mai_graph.backends.steered import SteeredBackend

    if route not in _STEER:
        raise ConfigError(
            f"route must be one of {sorted(_STEER)}, got {route!r}", parameter="route"
        )
    steer_small, steer_large, policy = _STEER[route]
    ctx = MAIContext(
        policy=policy,  # type: ignore[arg-type]
        cot_max_tokens=cot_tokens,
        cot_min_tokens=cot_tokens,
        short_max_tokens=16,
        s2_max_tokens=16,
    )
    return await arun(
        question,
        str(image),
        options=list(_OPTIONS.values()),
        small=SteeredBackend(small, steer_small),
        large=SteeredBackend(large, steer_large),
        context=ctx,
    )


async def fresh_run(
    small: VLMBackend, large: VLMBackend, fresh: Fresh, route: str, folder: Path, **kw: Any
) -> Any:
    """:func:`forced_run` on a new image and question."""
    from mai_graph.inputs.images import load_image

    path = folder / f"profile-{fresh.count}.png"
    load_image(fresh.image()).save(path)
    try:
        return await forced_run(
            small, large, route, image=path, question=f"{fresh.nonce()} {_QUESTION}", **kw
        )
    finally:
        path.unlink(missing_ok=True)


def _critical(metrics: Sequence[Any], client: dict[str, float]) -> float:
    verify = [m["latency_s"] + client[m["role"]] for m in metrics if m["node"] == "verify"]
    rest = sum(m["latency_s"] + client[m["role"]] for m in metrics if m["node"] != "verify")
    return (max(verify) if verify else 0.0) + rest


async def profile_pair(
    small: VLMBackend,
    large: VLMBackend,
    *,
    rounds: int = 3,
    image_size: tuple[int, int] = (320, 256),
    seed: int = 0,
    say: Callable[[str], None] | None = None,
    between_rounds: Callable[[int], Awaitable[None]] | None = None,
) -> LatencyModel:
    """Measure two running engines and fit the latency model (see the module docstring).

    Args:
        small: The small model's backend (started, or starting on the first request).
        large: The large model's backend.
        rounds: Repeats of every measurement (medians are fitted); at least 2.
        image_size: Size of the fresh test images (use your data's typical size: the image
            cost is per image at this size).
        seed: Seed of the test images, prompts and measurement order.
        say: Receives progress lines.
        between_rounds: Awaited after each round with the round's index: other measurements
            interleaved with the profile's rounds see the same machine load (speeds on a
            shared machine drift).

    Returns:
        The fitted model (``source="measured"``), its workload measured on a real MAI run.
    """
    import tempfile

    if rounds < 2:
        raise ConfigError(
            f"rounds must be at least 2, got {rounds}", parameter="rounds", value=rounds
        )
    say = say or (lambda _: None)
    fresh = Fresh(seed, image_size)
    order = random.Random(seed + 1)
    backends = {"small": small, "large": large}
    samples: dict[str, list[CallSample]] = {"small": [], "large": []}
    mv: list[tuple[Any, Any, float]] = []
    runs: dict[str, list[Any]] = {"agree": [], "transfer": []}
    ctx = MAIContext()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        say("warming up ...")
        await fresh_run(small, large, fresh, "transfer", folder)
        for r in range(rounds):
            say(f"round {r + 1}/{rounds} ...")
            jobs: list[tuple[str, Any]] = [
                (role, point) for role in ("small", "large") for point in _POINTS
            ]
            jobs += [("mv", None), ("mv", None), ("agree", None), ("transfer", None)]
            order.shuffle(jobs)
            for kind, point in jobs:
                if kind in ("small", "large"):
                    group, words, n, image, con = point
                    if group == "verify":
                        request = _verify_request(fresh, ctx, fresh.image())
                    else:
                        request = _request(fresh, words, n, image, con)
                    gen, wall = await _timed(backends[kind], request)
                    samples[kind].append(_sample(kind, group, gen, wall, image, con))
                elif kind == "mv":
                    mv.append(await _mv_round(small, large, fresh, ctx))
                else:
                    runs[kind].append(await fresh_run(small, large, fresh, kind, folder))
            if between_rounds is not None:
                await between_rounds(r)
    say("fitting ...")
    model = LatencyModel(
        small=fit_engine(small.name, samples["small"]),
        large=fit_engine(large.name, samples["large"]),
    )
    model.overlap = fit_overlap(model, mv)
    model.workload = _workload(runs["transfer"])
    client = {"small": model.small.client_s, "large": model.large.client_s}
    overhead = {
        route: statistics.median(r.wall_s - _critical(r.metrics, client) for r in results)
        for route, results in runs.items()
    }
    scoring = [
        r.sparsification["scoring_s"] for r in runs["transfer"] if r.sparsification is not None
    ]
    model.sparsify_s = statistics.median(scoring) if scoring else 0.0
    model.run_s = max(overhead["agree"], 0.0)
    extra = overhead["transfer"] - model.sparsify_s - model.run_s
    model.node_s = max(extra / 4, 0.0)
    model.notes = {
        "rounds": rounds,
        "image_size": list(image_size),
        "verification_rounds": [
            {"small": s.generated, "large": lg.generated, "measured_s": m} for s, lg, m in mv
        ],
        "run_overhead_s": overhead,
    }
    return model


async def _mv_round(
    small: VLMBackend, large: VLMBackend, fresh: Fresh, ctx: MAIContext
) -> tuple[CallTokens, CallTokens, float]:
    """One concurrent verification pair on a fresh image; the slower call's latency."""
    image = fresh.image()
    rs, rl = _verify_request(fresh, ctx, image), _verify_request(fresh, ctx, image)
    gs, gl = await asyncio.gather(_generate(small, rs), _generate(large, rl))

    def shape(role: str, gen: Any) -> CallTokens:
        cached = gen.cached_tokens or 0
        return CallTokens(
            role,  # type: ignore[arg-type]
            "verify",
            max(gen.prompt_tokens - cached, 0),
            cached,
            gen.generated_tokens,
            True,
            True,
        )

    return shape("small", gs), shape("large", gl), max(gs.latency_s, gl.latency_s)


def _workload(runs: Sequence[Any]) -> Workload:
    """Prompt sizes of a real MAI run on this pair (medians over transfer runs)."""

    def med(values: Sequence[float]) -> int:
        return round(statistics.median(values))

    by: dict[str, list[Any]] = {}
    for r in runs:
        for m in r.metrics:
            by.setdefault(f"{m['node']}/{m['role']}", []).append((m, r))
    verify = [m for m, _ in by["verify/small"]]
    reason = [m for m, _ in by["reason/small"]]
    s2 = [m for m, _ in by["extract/small"]]
    answer = by["answer/large"]

    def uncached(m: Any) -> int:
        return int(m["prompt_tokens"] - (m["cached_tokens"] or 0))

    return Workload(
        prompt_tokens=med([m["prompt_tokens"] for m in verify]),
        prompt_cached=med([m["cached_tokens"] or 0 for m in verify]),
        cot_prompt_tokens=med([m["prompt_tokens"] for m in reason]),
        reason_uncached=med([uncached(m) for m in reason]),
        s2_uncached=med([uncached(m) for m in s2]),
        answer_uncached=med(
            [max(uncached(m) - (r.sparsification or {}).get("tokens_out", 0), 0) for m, r in answer]
        ),
        short_tokens=med([m["generated_tokens"] for m in verify]),
    )


# -- a whole profile, its predictions ---------------------------------------------------------


def measure_pair(
    small: VLMBackend,
    large: VLMBackend,
    *,
    rounds: int = 3,
    image_size: tuple[int, int] = (320, 256),
    seed: int = 0,
    say: Callable[[str], None] | None = None,
) -> LatencyModel:
    """Start two engines (one after the other), :func:`profile_pair` them, shut them down.

    Args:
        small: The small model's backend (not started yet).
        large: The large model's backend.
        rounds: Repeats of every measurement (at least 2).
        image_size: Size of the fresh test images.
        seed: Seed of the test images, prompts and measurement order.
        say: Receives progress lines.

    Returns:
        The fitted model (see :func:`profile_pair`).
    """
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends

    tell = say or (lambda _: None)

    async def go() -> LatencyModel:
        try:
            tell("starting the engines, one after the other ...")
            await start_backends(small, large)
            tell("measuring ...")
            return await profile_pair(
                small, large, rounds=rounds, image_size=image_size, seed=seed, say=say
            )
        finally:
            shutdown_backends(small, large)

    return asyncio.run(go())


def predictions(
    model: LatencyModel, workload: Workload, rates: Sequence[float], s2_rate: float
) -> dict[str, Any]:
    """The model and what it predicts for ``workload``, as JSON-ready data.

    ``model``: the fitted (or given) model; ``modelled``: the workload, each route's latency
    (wall and critical path), the seed estimate, MAI's expected latency and speedup at each
    agreement rate in ``rates`` (``s2_rate`` of the disagreements settled by S2) and the
    break-even agreement rate.
    """
    return {
        "model": model.model_dump(),
        "modelled": {
            "workload": workload.model_dump(),
            "routes_s": model.predict_routes(workload),
            "critical_path_s": model.predict_routes(workload, wall=False),
            "seed_estimate_s": model.seed_estimate(workload),
            "mai": {
                str(rate): {
                    "latency_s": model.expected_mai(rate, s2_rate, workload),
                    "speedup_vs_large_cot": model.speedup(rate, s2_rate, workload),
                }
                for rate in rates
            },
            "break_even_agree_rate": model.break_even(s2_rate, workload),
        },
    }


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def format_model(
    model: LatencyModel, workload: Workload, rates: Sequence[float], s2_rate: float
) -> str:
    """The printed summary: speeds, per-route predictions, expected MAI, break-even."""
    lines: list[str] = []
    what_if = model.source == "what-if"
    if what_if:
        lines.append(
            f"what-if deployment from given speeds: {model.notes.get('what_if')} "
            "(every latency below is modelled)"
        )
    else:
        lines.append(
            f"measured on {model.small.name} / {model.large.name} "
            f"({model.notes.get('rounds', '?')} rounds, {model.created})"
        )
    lines.append("")
    lines.append(
        f"{'engine':<7} {'decode tok/s':>12} {'prefill tok/s':>13} {'call ms':>8} "
        f"{'image ms':>8} {'choice ms':>9} {'TTFT ms':>8} {'fit err':>8}"
    )
    for role, d in describe(model).items():
        fit = model.engine(role).fit
        err = f"{100 * fit['median_rel_error']:.1f}%" if fit else "-"
        prefill = "-" if d["prefill_tok_s"] is None else f"{d['prefill_tok_s']:.0f}"
        lines.append(
            f"{role:<7} {d['decode_tok_s']:>12.1f} {prefill:>13} {d['call_ms']:>8.1f} "
            f"{d['image_ms']:>8.1f} {d['choice_ms']:>9.1f} {d['ttft_ms']:>8.1f} {err:>8}"
        )
    source = "given" if what_if else "measured"
    lines.append(
        f"({source}; TTFT modelled for a fresh {workload.prompt_tokens}-token prompt"
        f"{' with an image' if workload.image else ''}; fit err: median relative error of "
        "the fit over the profiled call shapes)"
    )
    if what_if:
        lines.append(
            f"verification overlap {model.overlap:.2f} (given; default 0: one device per model)"
        )
    else:
        lines.append(
            f"verification overlap {model.overlap:.2f} (0 = the two calls fully concurrent, "
            f"1 = taking turns); graph overhead {_ms(model.run_s)} ms per run + "
            f"{_ms(model.node_s)} ms per further node; sparsify {_ms(model.sparsify_s)} ms"
        )
    lines.append("")
    lines.append(
        f"workload: prompt {workload.prompt_tokens} tokens, reasoning N_S = "
        f"{workload.cot_tokens}, large_cot reasoning N_L = "
        f"{workload.large_cot_tokens or workload.cot_tokens}, short answers "
        f"{workload.short_tokens} tokens, keep ratio {workload.keep_ratio:g} "
        f"({workload.transfer_tokens} tokens transferred)"
    )
    lines.append("")
    lines.append(f"{'route':<16} {'modelled ms':>11} {'speedup vs large_cot':>21}")
    routes = model.predict_routes(workload)
    for route in MODEL_ROUTES:
        lines.append(
            f"{route:<16} {_ms(routes[route]):>11} {routes['large_cot'] / routes[route]:>20.2f}x"
        )
    lines.append(
        f"seed model N_S/T_S + N_L'/T_L (decode only, transfer route): "
        f"{_ms(model.seed_estimate(workload))} ms (modelled)"
    )
    lines.append("")
    lines.append(
        f"MAI expected latency (modelled; {100 * s2_rate:.0f}% of disagreements settled by S2):"
    )
    lines.append(f"{'agree rate':>10} {'MAI ms':>8} {'speedup vs large_cot':>21}")
    for rate in rates:
        mai = model.expected_mai(rate, s2_rate, workload)
        lines.append(f"{100 * rate:>9.0f}% {_ms(mai):>8} {routes['large_cot'] / mai:>20.2f}x")
    even = model.break_even(s2_rate, workload)
    if even is None:
        verdict = "none: MAI is slower than large_cot even when every run agrees"
    elif even == 0:
        verdict = "0%: MAI is faster than large_cot at any agreement rate"
    else:
        verdict = f"{100 * even:.1f}% of runs must agree for MAI to match large_cot"
    lines.append(f"break-even agreement rate (modelled, vs large_cot): {verdict}")
    return "\n".join(lines)
