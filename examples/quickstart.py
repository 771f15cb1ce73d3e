"""Quickstart: answer a question about an image with MAI from Python.

    python examples/quickstart.py                       # offline, canned answers (fake backend)
    MAI_GRAPH_BACKEND=transformers MAI_GRAPH_SMALL=DIR/small MAI_GRAPH_LARGE=DIR/large \\
        python examples/quickstart.py                   # real models (`mai-graph build-tiny DIR`)

With ``MAI_GRAPH_BACKEND=vllm`` the same script runs on two vLLM engines.
"""

import tempfile
from pathlib import Path

from PIL import Image, ImageDraw

from mai_graph import run
from mai_graph.deploy.select import backends_from_env


def picture(path: Path) -> Path:
    img = Image.new("RGB", (256, 192), (128, 128, 128))
    ImageDraw.Draw(img).rectangle((80, 50, 176, 146), fill=(220, 30, 30))
    img.save(path)
    return path


def main() -> None:
    small, large = backends_from_env()
    with tempfile.TemporaryDirectory() as tmp:
        image = picture(Path(tmp) / "square.png")
        result = run(
            "Which colour is the square in the middle?",
            image,
            options=["red", "blue", "green", "yellow"],
            small=small,
            large=large,
            keep_ratio=0.2,  # any MAIContext field can be passed like this
            cot_max_tokens=64,
        )
    print(f"route:  {result.route}")
    print(f"answer: {result.answer!r} -> {result.canonical}")
    for m in result.metrics:
        print(f"  {m['node']:<8} {m['role']:<6} prompt={m['prompt_tokens']:<4} "
              f"cached={m['cached_tokens']} generated={m['generated_tokens']}")  # fmt: skip
    print(f"total: {result.totals['calls']} calls, {result.wall_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()
