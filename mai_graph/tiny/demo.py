"""``mai-graph demo``: MAI on real engines, on the trained pair or the random plumbing pair.

By default the demo runs the trained tiny pair (:mod:`mai_graph.pair.demo`): real questions,
real answers. ``--pair random`` runs what follows on the random-weight pair.
The tiny random models have random weights, so their text is meaningless and they rarely agree by
themselves. Each route is forced by narrowing the *choices* the engine may output for one step
(e.g. the two short answers to different letters); prefill, decode and caching are all real.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mai_graph.api import MAIResult, arun
from mai_graph.backends.base import VLMBackend
from mai_graph.backends.steered import SteeredBackend
from mai_graph.context import MAIContext

__all__ = ["DEMO_OPTIONS", "DEMO_QUESTION", "Scenario", "SCENARIOS", "demo_image", "run_demo"]

DEMO_QUESTION = (
    "Look at the picture of coloured shapes on a grey background. Which colour is the large "
    "square in the centre of the image, and how does it compare with the smaller circles?"
)
DEMO_OPTIONS = ["red", "blue", "green", "yellow"]


@dataclass(frozen=True)
class Scenario:
    """One forced route: per-backend choices by request purpose, and the policy."""

    route: str
    small: dict[str, list[str]]
    large: dict[str, list[str]]
    policy: str = "mai"


SCENARIOS = (
    Scenario("agree", small={"short": ["A"]}, large={"short": ["A"]}),
    Scenario("extract_agree", small={"short": ["A"], "s2": ["B"]}, large={"short": ["B"]}),
    Scenario("transfer", small={"short": ["A"], "s2": ["C"]}, large={"short": ["B"]}),
    Scenario("large_cot", small={}, large={}, policy="large_cot"),
)


def demo_image(path: Path) -> Path:
    """Draw the demo picture: a red square and blue circles on grey."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (320, 256), (128, 128, 128))
    draw = ImageDraw.Draw(img)
    draw.rectangle((110, 78, 210, 178), fill=(220, 30, 30))
    for x, y in ((40, 40), (260, 40), (40, 200), (260, 200)):
        draw.ellipse((x - 18, y - 18, x + 18, y + 18), fill=(30, 60, 220))
    img.save(path)
    return path


def demo_context(cot_tokens: int, policy: str = "mai") -> MAIContext:
    """Forced lengths: reasoning exactly ``cot_tokens``, short answers at most 8 tokens."""
    return MAIContext(
        policy=policy,  # type: ignore[arg-type]
        cot_max_tokens=cot_tokens,
        cot_min_tokens=cot_tokens,
        short_max_tokens=8,
        s2_max_tokens=8,
    )


async def run_scenario(
    scenario: Scenario, small: VLMBackend, large: VLMBackend, image: Path, cot_tokens: int
) -> MAIResult:
    """Run one forced route on the given engines."""
    return await arun(
        DEMO_QUESTION,
        str(image),
        options=DEMO_OPTIONS,
        small=SteeredBackend(small, scenario.small),
        large=SteeredBackend(large, scenario.large),
        context=demo_context(cot_tokens, scenario.policy),
    )


def run_demo(
    *,
    root: str | None = None,
    backend: str = "vllm",
    cot_tokens: int = 300,
    as_json: bool = False,
) -> int:
    """Force each route on the random pair: build it, start both engines, run every route.

    ``cot_tokens`` of reasoning per route; prints what happened (``as_json``: the results).
    The trained pair's demo is :func:`mai_graph.pair.demo.run_trained_demo`.
    """
    from mai_graph.backends.lifecycle import shutdown_backends, start_backends
    from mai_graph.tiny.build import tiny_backends, tiny_pair_paths

    say = (lambda *_: None) if as_json else print
    small, large = tiny_backends(backend, root)
    say(f"tiny pair: {tiny_pair_paths(root)[0].parent} (random weights: the text is "
        "meaningless, the machinery is real)")  # fmt: skip

    async def go() -> list[MAIResult]:
        with tempfile.TemporaryDirectory() as tmp:
            image = demo_image(Path(tmp) / "demo.png")
            say(f"starting two {backend} backends, one after the other ...")
            await start_backends(small, large)
            say("warming up ...")
            await run_scenario(SCENARIOS[2], small, large, image, 16)
            return [await run_scenario(s, small, large, image, cot_tokens) for s in SCENARIOS]

    try:
        results = asyncio.run(go())
    finally:
        shutdown_backends(small, large)
    if as_json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
        return 0
    baseline = results[-1].wall_s
    for scenario, result in zip(SCENARIOS, results):
        print(f"\n=== {scenario.route} " + "=" * (60 - len(scenario.route)))
        print(result.format())
    print("\nsummary (speedup over the large model reasoning itself, large_cot):")
    for result in results:
        print(
            f"  {result.route:<14} {result.wall_s * 1000:>8.0f} ms  "
            f"{baseline / result.wall_s:>5.1f}x"
        )
    return 0
