"""MAI shapes on two real engines: several images, a video, k drafts, a three-model chain.

    python benchmarks/shapes.py [--backend vllm|transformers] [--repeats 3]

Runs on the tiny local Qwen3-VL pair (random weights) with forced output lengths (short answers
8 tokens, reasoning 300), routes forced by replacing the *text* of a generation after the
engine produced it (the engine still does all the work). For each shape and route it prints the
median latency, the model calls and prompt tokens of a run, and the share of the shared prompt
prefix that the S2 call and the large model's transfer call read from the engine's cache. The
three-model chain reuses the pair as small -> large -> large (the last two stages share one
engine), which measures the chain's orchestration and cache behaviour, not a third model size.
"""

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
from pathlib import Path

from forced import Forced  # benchmarks/forced.py (the script's folder is on the path)
from PIL import Image, ImageDraw

from mai_graph import MAIContext, arun
from mai_graph.backends.lifecycle import shutdown_backends, start_backends
from mai_graph.backends.render import common_prefix, media_ids, render
from mai_graph.results import RESULTS_HELP, command_line, recording
from mai_graph.tiny.build import tiny_backends
from mai_graph.tiny.demo import DEMO_OPTIONS, DEMO_QUESTION, demo_image

SHORT, COT = 8, 300
LENGTHS = {"short": SHORT, "cot": COT, "s2": SHORT, "answer": SHORT}
AGREE = ({"short": "A"}, {"short": "A"})
TRANSFER = ({"short": "A", "s2": "C"}, {"short": "B", "answer": "D"})


def pictures(root):
    paths = []
    for i, side in enumerate((60, 100, 140)):
        img = Image.new("RGB", (320, 256), (128, 128, 128))
        ImageDraw.Draw(img).rectangle((160 - side // 2, 128 - side // 3, 160 + side // 2,
                                       128 + side // 3), fill=(220, 30, 30))  # fmt: skip
        img.save(root / f"p{i}.png")
        paths.append(str(root / f"p{i}.png"))
    return paths


def clip(root, frames=64, fps=16):
    import cv2
    import numpy as np

    path = root / "clip.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (320, 256))
    for i in range(frames):
        frame = np.full((256, 320, 3), 128, np.uint8)
        frame[100:160, 10 + 4 * i : 70 + 4 * i] = (30, 30, 220)
        writer.write(frame)
    writer.release()
    return str(path)


def media_tokens(backend, request, gen):
    return gen.prompt_tokens - len(render(backend.tokenizer, request.messages, set()).token_ids)


def shares(small_calls, large_calls, backend_small, backend_large):
    """(S2 cached shares, transfer cached share, reasonings holding a media placeholder).

    A sampled random-weight reasoning may contain an image / video placeholder token; the S2
    prompt replaces it (it must not read as media), so the cache serves S2 only up to there.
    """
    s2_shares, defused = [], 0
    banned = media_ids(backend_small.tokenizer)
    cot_gens = [g for r, g in small_calls if r.purpose == "cot"]  # every draft's: same prompt
    for request, s2_gen in [(r, g) for r, g in small_calls if r.purpose == "s2"]:
        s2_shares.append((s2_gen.cached_tokens or 0) / (cot_gens[0].prompt_tokens + COT - 1))
        defused += bool(banned.intersection(request.messages[-2].get("token_ids") or []))
    shorts = [(r, g) for r, g in large_calls if r.purpose == "short"]
    answers = [(r, g) for r, g in large_calls if r.purpose == "answer"]
    transfer = None
    if shorts and answers:
        (short_req, short_gen), (ans_req, ans_gen) = shorts[-1], answers[-1]
        tok = backend_large.tokenizer
        prefix = common_prefix(render(tok, short_req.messages, set()).token_ids,
                               render(tok, ans_req.messages, set()).token_ids)  # fmt: skip
        prefix += media_tokens(backend_large, short_req, short_gen)
        transfer = (ans_gen.cached_tokens or 0) / prefix
    return s2_shares, transfer, defused


_cases = itertools.count()


def scenarios(small, large, media):
    """name -> (coroutine factory returning (result, small wrappers, large wrappers))."""
    one, three, video = media["image"], media["images"], media["video"]

    def pair(texts, inputs, **settings):
        async def go():
            fs, fl = Forced(small, texts[0], LENGTHS), Forced(large, texts[1], LENGTHS)
            ctx = MAIContext(cot_max_tokens=COT, short_max_tokens=SHORT, s2_max_tokens=SHORT,
                             **settings)  # fmt: skip
            question = f"{DEMO_QUESTION} (case {next(_cases)})"
            result = await arun(question, options=DEMO_OPTIONS, small=fs, large=fl, context=ctx,
                                **inputs)  # fmt: skip
            return result, [fs], [fl]

        return go

    def chain(texts, inputs):
        async def go():
            first = Forced(small, texts[0], LENGTHS)
            middle, last = Forced(large, texts[1], LENGTHS), Forced(large, texts[2], LENGTHS)
            ctx = MAIContext(cot_max_tokens=COT, short_max_tokens=SHORT, s2_max_tokens=SHORT)
            question = f"{DEMO_QUESTION} (case {next(_cases)})"
            result = await arun(question, options=DEMO_OPTIONS, small=first,
                                large=[middle, last], context=ctx, **inputs)  # fmt: skip
            return result, [first, middle], [middle, last]

        return go

    image = {"image": one}
    return {
        "1 image: MV-exit": pair(AGREE, image),
        "1 image: transfer": pair(TRANSFER, image),
        "1 image: large-CoT": pair(({}, {"s2": "D"}), image, policy="large_cot"),
        "3 images: MV-exit": pair(AGREE, {"image": three[0], "images": three[1:]}),
        "3 images: transfer": pair(TRANSFER, {"image": three[0], "images": three[1:]}),
        "3 images: large-CoT": pair(
            ({}, {"s2": "D"}), {"image": three[0], "images": three[1:]}, policy="large_cot"
        ),  # fmt: skip
        "video 16 fr: MV-exit": pair(AGREE, {"video": video}, max_frames=16),
        "video 16 fr: transfer": pair(TRANSFER, {"video": video}, max_frames=16),
        "video 16 fr: large-CoT": pair(
            ({}, {"s2": "D"}), {"video": video}, max_frames=16, policy="large_cot"
        ),  # fmt: skip
        "k=3 drafts: MV-exit": pair(AGREE, image, drafts=3),
        "k=3 drafts: transfer 1": pair(TRANSFER, image, drafts=3),
        "k=3 drafts: transfer 2": pair(TRANSFER, image, drafts=3, transfer_drafts=2),
        "chain s>l>l: agree@1": chain(({"short": "A"}, {"short": "A"}, {}), image),
        "chain s>l>l: agree@2": chain(
            ({"short": "A", "s2": "C"}, {"short": "B", "answer": "D"}, {"short": "D"}), image
        ),
        "chain s>l>l: transfer@2": chain(
            (
                {"short": "A", "s2": "C"},
                {"short": "B", "answer": "D", "s2": "A"},
                {"short": "C", "answer": "B"},
            ),
            image,
        ),  # fmt: skip
    }


async def main(args) -> dict:
    if args.backend == "transformers":
        import torch

        torch.set_num_threads(1)
    small, large = tiny_backends(args.backend, args.dir)
    await start_backends(small, large)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            media = {
                "image": str(demo_image(root / "bench.png")),
                "images": pictures(root),
                "video": clip(root),
            }
            return await run_benchmark(args, small, large, media)
    finally:
        shutdown_backends(small, large)


async def run_benchmark(args, small, large, media) -> dict:
    table = {k: v for k, v in scenarios(small, large, media).items() if args.only in k}
    for go in table.values():  # warm-up: first-use costs (processors, kernels) are not measured
        await go()
    rows = {name: {"wall": [], "s2": [], "transfer": [], "calls": 0, "prompt": 0, "route": "",
                   "defused": 0} for name in table}  # fmt: skip
    for _ in range(args.repeats):
        for name, go in table.items():  # interleaved: machine noise spreads over every shape
            result, smalls, larges = await go()
            row = rows[name]
            row["wall"].append(result.wall_s)
            row["route"] = f"{result.route}" + (f"@{result.stage}" if result.stage else "")
            row["calls"] = int(result.totals["calls"])
            row["prompt"] = int(result.totals["prompt_tokens"])
            s2, tr, defused = shares(smalls[0].calls, larges[-1].calls, small, large)
            row["s2"] += s2
            row["defused"] += defused
            if tr is not None:
                row["transfer"].append(tr)

    print(
        f"backend: {args.backend}; tiny Qwen3-VL pair (random weights); short = {SHORT} tokens, "
        f"CoT = {COT} tokens; medians of {args.repeats} runs, shapes interleaved\n"
    )
    head = (f"{'shape: route':<26} {'ended':<15} {'latency ms':>10} {'calls':>6} "
            f"{'prompt tok':>10} {'S2 cached':>10} {'transfer cached':>16}")  # fmt: skip
    print(head)
    data: dict = {"repeats": args.repeats, "shapes": {}}
    for name, row in rows.items():
        s2 = f"{statistics.median(row['s2']):.1%}" if row["s2"] else "-"
        tr = f"{statistics.median(row['transfer']):.1%}" if row["transfer"] else "-"
        print(f"{name:<26} {row['route']:<15} {statistics.median(row['wall']) * 1e3:>10.0f} "
              f"{row['calls']:>6} {row['prompt']:>10} {s2:>10} {tr:>16}")  # fmt: skip
        shape = data["shapes"][name] = {
            "ended": row["route"], "latency_ms": statistics.median(row["wall"]) * 1e3,
            "calls": row["calls"], "prompt_tokens": row["prompt"], "defused": row["defused"],
        }  # fmt: skip
        if row["s2"]:
            shape["s2_cached_share"] = statistics.median(row["s2"])
        if row["transfer"]:
            shape["transfer_cached_share"] = statistics.median(row["transfer"])
    held = [f"{name} {row['defused']}/{len(row['s2'])}" for name, row in rows.items()
            if row["defused"]]  # fmt: skip
    print("\nS2 calls whose spliced reasoning held an image/video placeholder (random weights;")
    print(f"replaced, so the cache serves S2 only up to it): {', '.join(held) or 'none'}")
    return data


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vllm", choices=["vllm", "transformers"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=None, help="tiny pair folder (default: cache)")
    parser.add_argument("--only", default="", help="run the shapes whose name contains this")
    parser.add_argument("--results", metavar="FILE", help=RESULTS_HELP)
    args = parser.parse_args()
    command = command_line(["python", "benchmarks/shapes.py"], sys.argv[1:])
    with recording(args.results, command=command) as rec:
        rec.data.update(asyncio.run(main(args)))
