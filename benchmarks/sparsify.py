"""Sparsification cost and effect: scoring time vs the large model's answer, per strategy.

    python benchmarks/sparsify.py [--backend vllm|transformers] [--texts 4] [--cot 300]

The small model writes ``--texts`` chains of thought (forced to ``--cot`` tokens, one per
question). For each strategy at keep ratios 0.1 / 0.2 / 0.4 / 1.0, each reasoning is scored and
cut, then the large model answers from it: its prefix cache is reset and re-warmed with the
question's verify call first, as in a real run, so the answer call prefills exactly the
transferred tokens and the instruction. Prints medians: scoring ms, the answer call's prompt
tokens and ms, and scoring time as a share of the answer call (goal <= 10% for the default
strategy). ``none`` at 1.0 is the no-sparsification reference. Forced keeps are off by default
here (``--force-keep`` turns them on): random-weight text is full of digits and letters.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from mai_graph import GenerationRequest, MAIContext
from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.calls import read_question
from mai_graph.context import SparsifyStrategy
from mai_graph.inputs.sources import image_ref
from mai_graph.lineup import Lineup
from mai_graph.nodes._common import offline
from mai_graph.nodes.answer import answer
from mai_graph.nodes.baseline import baseline
from mai_graph.nodes.reason import reason
from mai_graph.nodes.sparsify import same_tokenizer, sparsify
from mai_graph.results import RESULTS_HELP, command_line, recording
from mai_graph.scoring import AttentionScorer, default_scorers
from mai_graph.tiny.build import tiny_backends
from mai_graph.tiny.demo import DEMO_OPTIONS, demo_image

QUESTIONS = [
    "Which colour is the large square in the centre of the picture?",
    "What colour are the small circles near the corners of the image?",
    "Is the square larger than each of the circles, and which colour is it?",
    "Which shape is drawn in red on the grey background of this picture?",
    "What is the colour of the background behind the shapes in the image?",
    "Which colour appears most often among the shapes in this image?",
]
RATIOS = (0.1, 0.2, 0.4, 1.0)
STRATEGIES: tuple[SparsifyStrategy, ...] = ("surprisal", "attention", "relevance", "none")


async def main(args) -> dict:
    if args.backend == "transformers":
        import torch

        torch.set_num_threads(1)
    small, large = tiny_backends(args.backend, args.dir)
    await start_backends(small, large)
    # vLLM exposes no attention: the scorer loads a transformers copy of the small checkpoint.
    attention = AttentionScorer(small if args.backend == "transformers" else small.model)
    scorers = {**default_scorers(small), "attention": attention}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            image = image_ref(demo_image(Path(tmp) / "bench.png"))
            return await run(args, small, large, scorers, image)
    finally:
        shutdown_backends(small, large)


async def run(args, small, large, scorers, image) -> dict:
    base = MAIContext(cot_max_tokens=args.cot, cot_min_tokens=args.cot, constrain_choices=False)
    share_ids = await same_tokenizer(small, large)
    lineup = Lineup.of(small, large)
    states = []
    for question in QUESTIONS[: args.texts]:
        inputs = {"question": question, "options": DEMO_OPTIONS, "image": image}
        state = {**inputs, "asked": read_question(inputs, base)}
        state.update(await reason(state, offline(base), lineup))
        states.append(state)
    rows = {}
    for strategy in STRATEGIES:
        for ratio in RATIOS if strategy != "none" else (1.0,):
            ctx = MAIContext(
                cot_max_tokens=args.cot, cot_min_tokens=args.cot, constrain_choices=False,
                sparsify=strategy, keep_ratio=ratio, force_keep=args.force_keep,
            )  # fmt: skip
            scoring, prompt, latency, kept = [], [], [], []
            for i, state in enumerate(states):
                update = await sparsify(state, ctx, scorers, share_ids)
                if i == 0 and strategy == "attention":  # first use loads / warms the scorer
                    update = await sparsify(state, ctx, scorers, share_ids)
                info = update["sparsification"]
                await large.reset_prefix_cache()
                only_large = offline(MAIContext(policy="large"))
                await baseline(state, only_large, lineup)  # fills the large model's prefix cache
                out = await answer({**state, **update}, offline(ctx), lineup)
                call = out["metrics"][0]
                scoring.append(info["scoring_s"])
                prompt.append(call["prompt_tokens"] - (call["cached_tokens"] or 0))
                latency.append(call["latency_s"])
                kept.append(info["tokens_out"])
            rows[(strategy, ratio)] = [
                statistics.median(v) for v in (scoring, prompt, latency, kept)
            ]

    data: dict = {"texts": len(states), "cot_tokens": args.cot, "strategies": {}}
    data["attention_scoring"] = await attention_paths(scorers["attention"], states, base)
    print(f"backend: {args.backend}; {len(states)} reasoning texts of {args.cot} tokens; "
          f"token ids transferred: {share_ids}; medians\n")  # fmt: skip
    head = (f"{'strategy':<10} {'ratio':>5} {'kept':>5} {'scoring ms':>11} {'answer prefill':>15}"
            f" {'answer ms':>10} {'scoring share':>14}")  # fmt: skip
    print(head)
    for (strategy, ratio), (s, p, t, k) in rows.items():
        print(f"{strategy:<10} {ratio:>5.1f} {k:>5.0f} {s * 1e3:>11.2f} {p:>15.0f} {t * 1e3:>10.1f}"
              f" {s / t:>13.1%}")  # fmt: skip
        data["strategies"].setdefault(strategy, {})[f"{ratio:.1f}"] = {
            "kept_tokens": k, "scoring_ms": s * 1e3, "answer_prefill_tokens": p,
            "answer_ms": t * 1e3, "scoring_share": s / t,
        }  # fmt: skip
    default = MAIContext().sparsify
    s, _, t, _ = rows[(default, MAIContext().keep_ratio)]
    print(f"\ndefault ({default}, 0.2): scoring is {s / t:.1%} of the answer call "
          f"(goal <= 10%: {'met' if s / t <= 0.1 else 'NOT met'})")  # fmt: skip
    data["default"] = {"strategy": default, "keep_ratio": MAIContext().keep_ratio,
                       "scoring_share": s / t, "goal_met": s / t <= 0.1}  # fmt: skip
    ref = rows[("none", 1.0)]
    s, p, t, _ = rows[(default, 0.2)]
    print(f"answer call with vs without sparsification: {p:.0f} vs {ref[1]:.0f} prefilled tokens, "
          f"{t * 1e3:.1f} vs {ref[2] * 1e3:.1f} ms")  # fmt: skip
    return data


async def attention_paths(scorer, states, ctx) -> dict:
    """Time the attention scorer's cheap path (cold and warm cache) against a full eager pass."""
    import time

    from mai_graph.nodes.sparsify import reasoning_input

    model = scorer.model
    full, cold, warm = [], [], []
    for state in states:
        reasoning = reasoning_input(state, state["asked"], ctx)
        request = GenerationRequest(reasoning.s2_messages, max_tokens=1, purpose="attention")
        await model.attention(request)  # load + warm
        for bucket, kwargs, clear in (
            (full, {"full": True}, True),
            (cold, {}, True),
            (warm, {}, False),
        ):
            if clear:
                await model.reset_prefix_cache()
            start = time.perf_counter()
            await model.attention(request, **kwargs)
            bucket.append(time.perf_counter() - start)
    f, c, w = (statistics.median(v) * 1e3 for v in (full, cold, warm))
    print(
        f"attention scoring: full eager pass {f:.1f} ms, cheap path {c:.1f} ms cold "
        f"({f / c:.1f}x faster), {w:.1f} ms with the prefix cached ({f / w:.1f}x faster)\n"
    )
    return {"full_ms": f, "cold_ms": c, "warm_ms": w, "cold_speedup": f / c, "warm_speedup": f / w}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vllm", choices=["vllm", "transformers"])
    parser.add_argument("--texts", type=int, default=4)
    parser.add_argument("--cot", type=int, default=300)
    parser.add_argument("--dir", default=None, help="tiny pair folder (default: cache)")
    parser.add_argument(
        "--force-keep",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="keep digits / option letters / negations (off: random-weight text is full of "
        "digits, which would hide the keep ratios)",
    )
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/sparsify.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        rec.data.update(asyncio.run(main(args)))
