"""Train the tiny demo pair: two Qwen3-VL models that answer the synthetic task for real.

``mai-graph train-pair OUT`` (:mod:`mai_graph.cli.train`; here :func:`train_pair`) builds the
task tokenizer, trains a small and a large model in two processes at once (one CPU thread each,
niced), evaluates both on fresh held-out items, measures their per-token decode speed, checks
the quality gates, and only then writes ``OUT/small``, ``OUT/large`` (Hugging Face layout, bf16
safetensors) and ``OUT/manifest.json``.

What the models learn (see :mod:`mai_graph.pair.task`): the graph's short-answer, reasoning,
answer-extraction (S2) and transfer prompts, rendered exactly as the engines render them. The
vision tower keeps its random weights (frozen: a trainable random ViT collapses at this scale);
the mergers and the language model learn, helped by an auxiliary perception loss (training
only). The gap between the two models comes from capacity (the small model sees a 32x32
thumbnail, one visual token, through a 2-layer language model; the large one 128x128 pixels,
16 visual tokens, through 12 layers) and, with the default budgets (10 and 32 minutes), from
compute: the manifest records each one's wall time, steps and FLOPs and says so.

Determinism: data, initialization and order are fixed by ``--seed``. A time budget
(``--minutes``) makes the number of steps depend on the machine; ``--steps`` (the manifest
records them) makes a run repeat step for step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mai_graph.errors import ConfigError
from mai_graph.eval.synthetic import task_of
from mai_graph.pair import file_checksums
from mai_graph.pair.grow import deepen_state, layer_count
from mai_graph.pair.task import (
    PURPOSES,
    REGION_LABELS,
    Example,
    Purpose,
    chance_accuracy,
    corpus,
    heldout_items,
    make_example,
    question_of,
    region_labels,
    train_item,
)
from mai_graph.tiny.build import TinySpec

__all__ = [
    "PAIR_SPECS",
    "PAIR_SPECS_V2",
    "PAIR_SPECS_V3",
    "PAIR_SPECS_V4",
    "Gates",
    "PairSpec",
    "build_tokenizer",
    "check_gates",
    "specs_for",
    "train_pair",
]

TRAINER_VERSION = 1
PLACES = 16
"""Visual-token places the auxiliary loss tells apart (a 4 x 4 merged grid at most)."""
OPTION_SLOTS = 4
"""Option letters the auxiliary option targets tell apart (A to D)."""


@dataclass(frozen=True)
class PairSpec:
    """One model of the pair: sizes, input resolution and optimizer settings."""

    tiny: TinySpec
    image_side: int
    """Pictures are resized to this many pixels a side (32 pixels per visual token a side)."""
    lr: float
    warmup: float = 0.05
    """Share of the run spent warming the learning rate up."""
    batch: int = 32
    micro: int = 2
    """Each batch runs as this many micro-batches of similar lengths (less padding)."""
    bf16: bool = False
    """Matrix products in bfloat16 (autocast; weights and optimizer stay fp32)."""
    aux_weight: float = 0.5
    """Weight of the auxiliary perception loss (what each picture region holds)."""
    mix: dict[str, float] = field(default_factory=dict)
    """Share of each purpose in a batch."""
    templates: dict[str, float] | None = None
    """Share of each question template in training (None: equal)."""
    rope_theta: float = 10_000.0
    """RoPE base: small, so the few positions of a tiny picture's tokens are told apart."""
    p_masked_hint: float = 0.0
    """Share of transfer examples whose stated final answer is masked (task v2)."""
    option_labels: bool = False
    """Auxiliary targets on each option's last prompt token (its letter, whether it is right;
    :func:`~mai_graph.pair.task.option_marks`), under ``aux_weight`` (task v4)."""


SMALL_LM = TinySpec(64, 2, 2, 1, 128, 32, 2, 2, 64)
LARGE_LM = TinySpec(64, 12, 2, 1, 192, 64, 2, 2, 128)
"""The two architectures, shared by both pairs (v2 changes the views and the training)."""

PAIR_SPECS: dict[str, PairSpec] = {
    "small": PairSpec(
        SMALL_LM,
        image_side=32,
        lr=2e-3,
        mix={"short": 0.45, "cot": 0.35, "s2": 0.2},
    ),
    "large": PairSpec(
        LARGE_LM,
        image_side=128,
        lr=2.5e-3,
        batch=16,
        micro=1,
        bf16=True,
        mix={"short": 0.5, "cot": 0.15, "s2": 0.1, "answer": 0.25},
        templates={"count": 0.2, "colour": 0.2, "exists": 0.2, "tallest": 0.3, "bars": 0.1},
    ),
}
"""The pair. The large model is deeper (more sequential work per token, which is what makes
decode slower on any engine) and sees sixteen times the visual tokens."""

PAIR_SPECS_V2: dict[str, PairSpec] = {
    "small": PairSpec(
        SMALL_LM,
        image_side=64,
        lr=2e-3,
        batch=24,
        micro=2,
        mix={"short": 0.35, "cot": 0.45, "s2": 0.2},
    ),
    "large": PairSpec(
        LARGE_LM,
        image_side=128,
        lr=2.5e-3,
        batch=16,
        micro=1,
        bf16=True,
        mix={"short": 0.4, "cot": 0.2, "s2": 0.1, "answer": 0.3},
        p_masked_hint=0.35,
    ),
}
"""The v2 pair (task v2, compositional questions): the same depths as v1; the small model sees
four visual tokens (64x64 pixels) so that its counts are worth reasoning over, the large one
sixteen; the large model learns the transfer with the stated answer masked a third of the time.
The shipped large model trained 38 minutes from scratch and 30 more continued at half the
learning rate (``--retrain large --init-from WORK --lr-scale 0.5``; its manifest lists both
runs): at 38 minutes it was still below the small model, and the continuation is where it
learned to read colours and letters (docs/tiny-pair.md)."""


PAIR_SPECS_V3: dict[str, PairSpec] = {
    "small": PairSpec(
        SMALL_LM,
        image_side=128,
        lr=2e-3,
        batch=24,
        micro=2,
        mix={"short": 0.35, "cot": 0.45, "s2": 0.2},
        templates={"colour_at": 0.25, "way": 0.25, "follow": 0.5},
    ),
    "large": PairSpec(
        LARGE_LM,
        image_side=128,
        lr=1.5e-3,
        batch=16,
        micro=1,
        bf16=False,
        mix={"short": 0.3, "cot": 0.35, "s2": 0.05, "answer": 0.3},
        templates={"colour_at": 0.25, "way": 0.25, "follow": 0.5},
        p_masked_hint=0.35,
    ),
}
"""The v3 pair (task v3, arrows to follow): the same depths as v1 and v2; both models see
sixteen visual tokens (one per grid cell), so the gap is the language model's depth: a short
answer to a four-hop question needs the hops inside one forward pass, a reasoning takes them
one written step at a time. Half of the training items are ``follow`` questions (a third of the
held-out ones); the large model learns the transfer from hints that are wrong 40% of the time
(one step misread) and masked a third of the time. The large model trains in fp32: on this
2-core CPU bf16 autocast made its steps about 4x slower (3.4-5.1 s against 0.8-1.3 s on
v3's 150-190-token batches)."""


_V4_TEMPLATES = {"colour_at": 0.15, "points": 0.35, "reach": 0.5}
PAIR_SPECS_V4: dict[str, PairSpec] = {
    role: dataclasses.replace(PAIR_SPECS_V3[role], templates=_V4_TEMPLATES, option_labels=True)
    for role in ("small", "large")
}
"""The v4 pair (task v4, arrows followed from a named cell): v3's models and settings; more
of the training goes to the option-letter question (``points``) and half to ``reach``. The
shipped v4 pair continued the v3 pair's weights (``--init-from``), which already read every
arrow's cell, colour and way correctly: what v3 did not learn was to find an arrow by its
colour and to map a way to its option letter (in v3's ``way`` the letter depends on a way read
at a cell the question names: three attention steps in a row, one more than the small model
has; a ``points`` option is a cell that reads its own arrow). Its first run left the letter
at chance for both models, even after a reasoning that names the right cell (a teacher-forced
probe: 10 of 40): nothing in the answer's loss alone taught an option to carry its letter and
its check against the picture, so v4 adds the option targets (``option_labels``), training
only."""


def specs_for(task: str) -> dict[str, PairSpec]:
    """The pair's specs for ``task`` (``v1`` to ``v4``)."""
    task_of(task)
    return {"v1": PAIR_SPECS, "v2": PAIR_SPECS_V2, "v4": PAIR_SPECS_V4}.get(task, PAIR_SPECS_V3)


@dataclass(frozen=True)
class Gates:
    """What the pair must show on held-out items before it is saved."""

    min_gap: float = 0.10
    """The large model at least this much more accurate than the small (overall)."""
    min_chance_factor: float | None = 2.0
    """The small model at least this many times chance accuracy (None: no such gate)."""
    min_speed_ratio: float = 2.5
    """The large model at least this many times slower per generated token."""


# -- building ----------------------------------------------------------------------------------


def build_tokenizer(task: str = "v1") -> Any:
    """The task tokenizer: byte-level BPE trained on :func:`~mai_graph.pair.task.corpus`.

    Every task word is one token; any other text still encodes (byte fallback). The Qwen chat
    special tokens and chat template are those of the tiny random pair. Task v3's cell names
    (`` r2c3``, with the space before them) are added as whole tokens: the pre-tokenizer
    would split them into four.
    """
    from mai_graph.tiny.build import build_tokenizer as build

    tokenizer = build(corpus(task=task), vocab_size=2048, model_max_length=4096)
    if task in ("v3", "v4"):  # cell names are one token each (BPE splits letters from digits)
        from mai_graph.eval.synthetic import cell_name

        tokenizer = with_whole_words(tokenizer, [f" {cell_name(c)}" for c in range(16)])
    return tokenizer


_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
"""The byte-level pre-tokenizer's own split (GPT-2's), which ``with_whole_words`` extends."""


def with_whole_words(tokenizer: Any, words: Sequence[str]) -> Any:
    """``tokenizer`` with each of ``words`` (e.g. `` r2c3``) encoded as one ordinary token.

    The byte-level split cuts letters from digits; the words are split off first, whole, and
    the BPE model looks each piece up in its vocabulary before merging (``ignore_merges``), so
    each word gets one id (the next free ones, in order) and every other text keeps its ids.
    They are vocabulary entries, not added tokens: the graph's renderer encodes added tokens
    in caller text character by character (they could be control tokens), and the pair must
    read its cell names in a question as it writes them in a reasoning. Any tokenizer of this
    form (``AddedToken`` words included) converts, keeping their ids.
    """
    import json
    import re as _re

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from mai_graph.tiny.build import CHAT_TEMPLATE
    from mai_graph.tiny.qwen_vocab import QWEN_TOKEN_ROLES

    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    byte = _bytes_to_unicode()
    vocab = spec["model"]["vocab"]
    added = {t["content"]: t["id"] for t in spec["added_tokens"]}
    next_id = max([*vocab.values(), *added.values()]) + 1
    for word in words:
        piece = "".join(byte[b] for b in word.encode())
        vocab[piece] = added.pop(word) if word in added else next_id
        next_id = max(next_id, vocab[piece] + 1)
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in words]
    spec["model"]["ignore_merges"] = True
    alternatives = "|".join(_re.escape(w) for w in sorted(words, key=len, reverse=True))
    spec["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": f"{alternatives}|{_GPT2_SPLIT}"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False},
        ],
    }  # fmt: skip
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        **QWEN_TOKEN_ROLES,
        model_max_length=tokenizer.model_max_length,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _bytes_to_unicode() -> dict[int, str]:
    """The byte-level alphabet: each byte's printable stand-in (GPT-2's table)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def build_processor(tokenizer: Any, side: int) -> Any:
    """A Qwen3-VL processor that resizes pictures to about ``side`` x ``side`` pixels."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    from mai_graph.tiny.build import CHAT_TEMPLATE

    size = {"shortest_edge": side * side, "longest_edge": side * side}
    image_processor = Qwen2VLImageProcessor(
        patch_size=16, merge_size=2, temporal_patch_size=2, size=size,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )  # fmt: skip
    # Videos are not part of the task; engines still size a video budget from these.
    video_size = {"shortest_edge": 32 * 32 * 16, "longest_edge": 32 * 32 * 64}
    video_processor = Qwen3VLVideoProcessor(
        patch_size=16, merge_size=2, temporal_patch_size=2, size=video_size
    )
    return Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=CHAT_TEMPLATE,
    )


def new_model(spec: PairSpec, tokenizer: Any, seed: int) -> Any:
    """A freshly initialized model (fp32), its random vision tower frozen but the mergers."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    from mai_graph.tiny.build import tiny_config, tiny_generation_config

    torch.manual_seed(seed)
    config = tiny_config(spec.tiny, tokenizer)
    config.text_config.rope_parameters["rope_theta"] = spec.rope_theta
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config = tiny_generation_config(tokenizer)
    for name, param in model.named_parameters():
        frozen = ".visual." in f".{name}" and "merger" not in name
        param.requires_grad_(not frozen)
    return model


# -- batches -----------------------------------------------------------------------------------


@dataclass
class _Batch:
    inputs: dict[str, Any]
    rows: Any
    """Row of each target token (gather index)."""
    cols: Any
    """Position whose logits predict each target token."""
    targets: Any
    sample: Any
    """Example index of each target token (per-example averaging)."""
    n: int
    prefix: int = 0
    """Leading tokens every row shares (computed once, see :func:`loss_of`)."""
    aux_rows: Any = None
    """Row and position of each visual token with perception labels (auxiliary loss)."""
    aux_cols: Any = None
    aux_labels: Any = None
    """Per visual token, the labels of the picture regions it covers (see ``region_labels``)."""
    aux_places: Any = None
    """Per visual token, its place in the picture (row * columns + column of its grid)."""
    option_rows: Any = None
    """Row and position of each option's last token (auxiliary option targets)."""
    option_cols: Any = None
    option_labels: Any = None
    """Per option, ``(letter index, 1 if it is the right option)``."""


class Batcher:
    """Turns examples into model inputs (image placeholders expanded, m-RoPE positions)."""

    def __init__(self, model: Any, processor: Any, tokenizer: Any) -> None:
        self.model = model
        self.processor = processor
        self.tokenizer = tokenizer
        self.image_token = model.config.image_token_id
        self.pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def vision(self, images: Sequence[Any]) -> tuple[dict[str, Any], list[int]]:
        """Pixel inputs of pictures and the number of visual tokens of each."""
        out = self.processor.image_processor(images=list(images), return_tensors="pt")
        merge = self.processor.image_processor.merge_size
        counts = [int(g.prod()) // (merge * merge) for g in out["image_grid_thw"]]
        return {
            "pixel_values": out["pixel_values"],
            "image_grid_thw": out["image_grid_thw"],
        }, counts

    def expand(self, ids: Sequence[int], count: int) -> list[int]:
        """The prompt with its one image placeholder repeated ``count`` times."""
        out: list[int] = []
        for t in ids:
            out.extend([t] * count if t == self.image_token else [t])
        return out

    def positions(self, input_ids: Any, grids: Any) -> Any:
        """3-D m-RoPE positions (padding is on the right and attends nowhere that matters)."""
        mm = (input_ids == self.image_token).int()
        return self.model.model.get_rope_index(input_ids, mm, image_grid_thw=grids)[0]

    def batch(
        self,
        examples: Sequence[Example],
        images: Sequence[Any],
        *,
        share_prefix: bool = True,
        regions: Sequence[Sequence[int]] | None = None,
        options: bool = False,
    ) -> _Batch:
        """Inputs for teacher forcing; the loss reads only target positions.

        With ``share_prefix`` the text every row starts with (system prompt, up to the image)
        is marked to be computed once for the whole batch. ``regions`` (per example, the
        labels of the picture's 4 x 4 regions, row by row) adds the auxiliary perception
        targets: each visual token the labels of the regions it covers, and its place.
        ``options`` adds the option targets of the examples' ``options`` marks.
        """
        import torch

        vision, counts = self.vision(images)
        seqs, rows, cols, targets, sample = [], [], [], [], []
        aux_rows: list[int] = []
        aux_cols: list[int] = []
        aux_labels: list[list[int]] = []
        aux_places: list[int] = []
        opt_rows: list[int] = []
        opt_cols: list[int] = []
        opt_labels: list[tuple[int, int]] = []
        merge = self.processor.image_processor.merge_size
        for i, (ex, count) in enumerate(zip(examples, counts)):
            prompt = self.expand(ex.prompt_ids, count)
            if regions is not None:
                _, gh, gw = (int(x) for x in vision["image_grid_thw"][i])
                start = prompt.index(self.image_token)
                for k, labels in enumerate(_token_regions(regions[i], gh // merge, gw // merge)):
                    aux_rows.append(i)
                    aux_cols.append(start + k)
                    aux_labels.append(labels)
                    aux_places.append(k)
            if options and ex.options:
                image_at = ex.prompt_ids.index(self.image_token)
                for at, letter, right in ex.options:
                    opt_rows.append(i)
                    opt_cols.append(at + (count - 1 if at > image_at else 0))
                    opt_labels.append((letter, right))
            seqs.append(prompt + ex.target_ids[:-1])
            for j, t in enumerate(ex.target_ids):
                rows.append(i)
                cols.append(len(prompt) - 1 + j)
                targets.append(t)
                sample.append(i)
        width = max(len(s) for s in seqs)
        input_ids = torch.tensor([s + [self.pad] * (width - len(s)) for s in seqs])
        inputs = {
            "input_ids": input_ids,
            "position_ids": self.positions(input_ids, vision["image_grid_thw"]),
            **vision,
        }
        shared = os.path.commonprefix(seqs) if share_prefix else []
        prefix = min(len(shared), seqs[0].index(self.image_token) if shared else 0)
        return _Batch(
            inputs,
            torch.tensor(rows),
            torch.tensor(cols),
            torch.tensor(targets),
            torch.tensor(sample),
            len(examples),
            prefix,
            torch.tensor(aux_rows) if aux_labels else None,
            torch.tensor(aux_cols) if aux_labels else None,
            torch.tensor(aux_labels) if aux_labels else None,
            torch.tensor(aux_places) if aux_labels else None,
            torch.tensor(opt_rows) if opt_labels else None,
            torch.tensor(opt_cols) if opt_labels else None,
            torch.tensor(opt_labels) if opt_labels else None,
        )


def _hidden(model: Any, b: _Batch) -> Any:
    """Last hidden states of the batch; a shared prefix runs once, its keys / values broadcast.

    Causal attention makes the prefix's states the same in every row, so computing them once
    (with gradients) and reading them through a broadcast cache is exact.
    """
    if not b.prefix:
        return model.model(**b.inputs, use_cache=False).last_hidden_state
    from transformers import DynamicCache

    p, ids, pos = b.prefix, b.inputs["input_ids"], b.inputs["position_ids"]
    cache: Any = DynamicCache(config=model.config)
    model.model(input_ids=ids[:1, :p], position_ids=pos[:, :1, :p], past_key_values=cache,
                use_cache=True)  # fmt: skip
    for layer in cache.layers:
        layer.keys = layer.keys.expand(b.n, -1, -1, -1)
        layer.values = layer.values.expand(b.n, -1, -1, -1)
    rest = {k: v for k, v in b.inputs.items() if k not in ("input_ids", "position_ids")}
    out = model.model(
        input_ids=ids[:, p:], position_ids=pos[:, :, p:], past_key_values=cache,
        use_cache=True, **rest,
    )  # fmt: skip
    return out.last_hidden_state


def _token_regions(labels: Sequence[int], gh: int, gw: int, grid: int = 4) -> list[list[int]]:
    """The region labels each visual token of a ``gh`` x ``gw`` merged grid covers.

    >>> _token_regions(list(range(16)), 2, 2)[1]
    [2, 3, 6, 7]
    >>> _token_regions(list(range(16)), 4, 4)[5]
    [5]
    """
    if grid % gh or grid % gw:
        raise ConfigError(f"a {gh}x{gw} token grid does not tile {grid}x{grid} regions")
    sh, sw = grid // gh, grid // gw
    return [
        [labels[(r * sh + i) * grid + c * sw + j] for i in range(sh) for j in range(sw)]
        for r in range(gh)
        for c in range(gw)
    ]


def aux_head_for(spec: PairSpec) -> Any:
    """The auxiliary perception head of a model (training only; dropped when it is saved).

    It reads the final hidden state of each visual token: the classes of the picture regions
    the token covers (:func:`~mai_graph.pair.task.region_labels`) and the token's place; with
    ``spec.option_labels``, its last outputs read each option's last token (letter, right).
    """
    import torch

    side = spec.image_side // 32  # merged visual tokens a side
    options = OPTION_SLOTS + 2 if spec.option_labels else 0  # letter, right or not
    return torch.nn.Linear(
        spec.tiny.hidden_size, PLACES + (4 // side) ** 2 * REGION_LABELS + options
    )


def loss_of(model: Any, b: _Batch, aux_head: Any = None) -> Any:
    """Mean over examples of each example's mean target-token cross-entropy.

    With ``aux_head`` (:func:`aux_head_for`) and a batch with region labels, returns
    ``(task_loss, perception_loss)``: the final hidden state of each visual token must tell what
    its regions hold and where in the picture it sits (training only; the head is dropped).
    """
    import torch
    import torch.nn.functional as F

    hidden = _hidden(model, b)
    logits = model.lm_head(hidden[b.rows, b.cols - b.prefix])
    per_token = F.cross_entropy(logits.float(), b.targets, reduction="none")
    sums = torch.zeros(b.n).index_add_(0, b.sample, per_token)
    counts = torch.zeros(b.n).index_add_(0, b.sample, torch.ones_like(per_token))
    task = (sums / counts).mean()
    if aux_head is None:
        return task
    aux = torch.zeros(())
    if b.aux_labels is not None:
        out = aux_head(hidden[b.aux_rows, b.aux_cols - b.prefix]).float()
        what = out[:, PLACES : PLACES + b.aux_labels.shape[1] * REGION_LABELS]
        aux = F.cross_entropy(what.reshape(-1, REGION_LABELS), b.aux_labels.reshape(-1))
        aux = aux + F.cross_entropy(out[:, :PLACES], b.aux_places)
    if b.option_labels is not None:  # the head's last outputs: letter, then right or not
        out = aux_head(hidden[b.option_rows, b.option_cols - b.prefix]).float()
        letters = out[:, -(OPTION_SLOTS + 2) : -2]
        aux = aux + F.cross_entropy(letters, b.option_labels[:, 0])
        aux = aux + F.cross_entropy(out[:, -2:], b.option_labels[:, 1])
    return task, aux


# -- prediction --------------------------------------------------------------------------------


def predict_short(
    model: Any, processor: Any, tokenizer: Any, items: Sequence[Any], *, batch: int = 50
) -> list[str]:
    """Greedy short answers to the graph's short prompt, as the engines give them.

    Multiple choice is constrained to the option letters (as the graph asks the engines); other
    answers are decoded greedily until the end of the turn (at most 4 tokens).
    """
    import torch

    from mai_graph.backends.render import render
    from mai_graph.calls import short_request
    from mai_graph.pair.task import CONTEXT

    b = Batcher(model, processor, tokenizer)
    answers = [""] * len(items)
    groups: dict[int, list[int]] = {}
    prompts = []
    for i, item in enumerate(items):
        ids = render(tokenizer, short_request(question_of(item), CONTEXT).messages, {b.eos})
        prompts.append(ids.token_ids)
        groups.setdefault(len(ids.token_ids), []).append(i)
    model.eval()
    with torch.no_grad():
        for members in groups.values():
            for start in range(0, len(members), batch):
                chunk = members[start : start + batch]
                vision, counts = b.vision([items[i].image for i in chunk])
                seqs = [b.expand(prompts[i], c) for i, c in zip(chunk, counts)]
                done = [False] * len(chunk)
                out: list[list[int]] = [[] for _ in chunk]
                for step in range(4):
                    input_ids = torch.tensor(seqs)
                    pos = b.positions(input_ids, vision["image_grid_thw"])
                    logits = model(
                        input_ids=input_ids, position_ids=pos, use_cache=False, **vision
                    ).logits[:, -1]
                    for k, i in enumerate(chunk):
                        options = items[i].row.get("options")
                        if options and step == 0:
                            letters = [tokenizer.convert_tokens_to_ids(x) for x in options]
                            nxt = letters[int(logits[k, letters].argmax())]
                            out[k].append(nxt)
                            done[k] = True
                        elif not done[k]:
                            nxt = int(logits[k].argmax())
                            done[k] = nxt == b.eos
                            if not done[k]:
                                out[k].append(nxt)
                        else:
                            nxt = b.pad
                        seqs[k] = seqs[k] + [nxt]
                    if all(done):
                        break
                for k, i in enumerate(chunk):
                    answers[i] = tokenizer.decode(out[k], skip_special_tokens=True)
    return answers


def _short_answers(folder: Path, processor: Any, tokenizer: Any, items: Sequence[Any]) -> list[str]:
    """:func:`predict_short` of the model saved in ``folder`` (its bf16 weights in fp32)."""
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(folder).float().eval()
    return predict_short(model, processor, tokenizer, items)


def score_answers(items: Sequence[Any], answers: Sequence[str]) -> list[bool]:
    """Whether each answer matches its item's gold answer (the evaluation's matching)."""
    from mai_graph.eval.scorers import score

    return [
        score(a, it.row["answer"], it.row["kind"], it.row.get("options")).correct
        for it, a in zip(items, answers)
    ]


# -- one model's training (a child process) ----------------------------------------------------


def _schedule(progress: float, spec: PairSpec) -> float:
    """Learning-rate factor: linear warm-up, then cosine down to a tenth."""
    if progress < spec.warmup:
        return max(progress / spec.warmup, 0.01)
    t = min(1.0, (progress - spec.warmup) / (1 - spec.warmup))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))


def _split(order: list[int], parts: int) -> list[list[int]]:
    size = math.ceil(len(order) / parts)
    return [order[i : i + size] for i in range(0, len(order), size)]


def _purposes(spec: PairSpec, n: int, rng: random.Random) -> list[Purpose]:
    names = [p for p in PURPOSES if spec.mix.get(p)]
    return rng.choices(names, weights=[spec.mix[p] for p in names], k=n)


def earlier_record(folder: Path, role: str) -> dict[str, Any]:
    """The training record of ``role`` in ``folder`` (a scratch folder or a saved pair).

    A scratch folder keeps ``ROLE.record.json``; a saved pair's manifest holds ``models.ROLE``,
    so that a shipped pair can be continued.
    """
    record = folder / f"{role}.record.json"
    if record.is_file():
        return dict(json.loads(record.read_text(encoding="utf-8")))
    manifest = folder / "manifest.json"
    if manifest.is_file():
        return dict(json.loads(manifest.read_text(encoding="utf-8"))["models"][role])
    raise ConfigError(
        f"{folder} holds no record of the {role} model (neither {role}.record.json nor a "
        "pair's manifest.json): pass a train-pair scratch folder or a saved pair",
        parameter="--init-from",
        value=str(folder),
    )


def _tokenizer_folder(folder: Path) -> Path:
    """Where a scratch folder (``tokenizer/``) or a saved pair (``small/``) keeps its tokenizer."""
    return folder / "tokenizer" if (folder / "tokenizer").is_dir() else folder / "small"


def train_role(
    role: str,
    work: Path,
    *,
    seed: int,
    seconds: float | None,
    steps: int | None,
    heldout_n: int,
    heldout_seed: int,
    task: str = "v1",
    init_from: Path | None = None,
    lr_scale: float = 1.0,
) -> dict[str, Any]:
    """Train one model, save it (bf16) to ``work/role`` and score it on held-out items.

    Writes ``work/role.log.jsonl`` (progress) and returns the training record.
    """
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    spec = specs_for(task)[role]
    if lr_scale != 1.0:
        spec = dataclasses.replace(spec, lr=spec.lr * lr_scale)
    templates = task_of(task)
    tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
    processor = build_processor(tokenizer, spec.image_side)
    role_seed = seed * 1000 + (0 if role == "small" else 1)
    model = new_model(spec, tokenizer, role_seed)
    previous: dict[str, Any] = {}
    if init_from is not None:  # continue an earlier run: its weights, its data stream onwards
        from transformers import Qwen3VLForConditionalGeneration

        trained = Qwen3VLForConditionalGeneration.from_pretrained(init_from / role)
        state = trained.float().state_dict()
        if layer_count(state) != spec.tiny.num_layers:  # a deeper spec: new layers start as no-ops
            state = deepen_state(state, spec.tiny.num_layers)
        model.load_state_dict(state)
        previous = earlier_record(init_from, role)
    offset = int(previous.get("steps", 0))
    params = [p for p in model.parameters() if p.requires_grad]
    aux_head = aux_head_for(spec)
    aux_params = list(aux_head.parameters())
    opt = torch.optim.AdamW(params + aux_params, lr=spec.lr, betas=(0.9, 0.98), weight_decay=0.01)
    batcher = Batcher(model, processor, tokenizer)
    monitor = heldout_items(150, seed=heldout_seed + 1, task=task)
    log = (work / f"{role}.log.jsonl").open("w", encoding="utf-8")
    rng = random.Random(f"mai-pair-mix|{role_seed}")
    start = time.perf_counter()
    paused = 0.0  # monitoring time, left out of the schedule's clock
    next_report, step, losses = 120.0, 0, []
    flops_per_token = 6 * sum(p.numel() for p in params)
    tokens = 0
    while True:
        elapsed = time.perf_counter() - start - paused
        progress = step / steps if steps else elapsed / float(seconds or 1)
        if progress >= 1:
            break
        for group in opt.param_groups:
            group["lr"] = spec.lr * _schedule(progress, spec)
        weights = [spec.templates[t] for t in templates] if spec.templates else None
        items = [
            train_item(seed, offset + step, j, weights=weights, task=task)
            for j in range(spec.batch)
        ]
        purposes = _purposes(spec, spec.batch, rng)
        examples = [
            make_example(it, p, tokenizer, rng, eos_id=batcher.eos,
                         p_masked_hint=spec.p_masked_hint)
            for it, p in zip(items, purposes)
        ]  # fmt: skip
        order = sorted(range(len(examples)), key=lambda i: len(examples[i].prompt_ids))
        model.train()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for part in _split(order, spec.micro):
            b = batcher.batch(
                [examples[i] for i in part],
                [items[i].image for i in part],
                regions=[region_labels(items[i]) for i in part] if spec.aux_weight else None,
                options=spec.option_labels and bool(spec.aux_weight),
            )
            tokens += int(b.inputs["input_ids"].numel())
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=spec.bf16):
                answer_loss, aux = loss_of(model, b, aux_head)
                loss = (answer_loss + spec.aux_weight * aux) * (len(part) / len(examples))
            loss.backward()
            total += answer_loss.item() * len(part) / len(examples)
        torch.nn.utils.clip_grad_norm_(params + aux_params, 1.0)
        opt.step()
        losses.append(total)
        step += 1
        if elapsed >= next_report or (steps and step == steps):
            tick = time.perf_counter()
            correct = score_answers(monitor, predict_short(model, processor, tokenizer, monitor))
            by: dict[str, list[bool]] = {}
            for it, ok in zip(monitor, correct):
                by.setdefault(it.template, []).append(ok)
            entry = {
                "step": step,
                "elapsed_s": round(elapsed, 1),
                "loss": round(statistics.fmean(losses[-50:]), 4),
                "lr": opt.param_groups[0]["lr"],
                "monitor_accuracy": round(sum(correct) / len(correct), 4),
                "monitor_by_template": {t: round(sum(v) / len(v), 2) for t, v in by.items()},
            }
            log.write(json.dumps(entry) + "\n")
            log.flush()
            next_report = elapsed + 120.0
            paused += time.perf_counter() - tick
    wall = time.perf_counter() - start
    target = work / role
    model = model.to(torch.bfloat16)
    model.save_pretrained(target)
    processor.save_pretrained(target)
    # Held-out scores of the weights as saved (bf16), computed in fp32.
    model = model.float()
    items = heldout_items(heldout_n, seed=heldout_seed, task=task)
    answers = predict_short(model, processor, tokenizer, items)
    record = {
        "role": role,
        "spec": asdict(spec),
        "steps": offset + step,
        "wall_s": round(wall + float(previous.get("wall_s", 0.0)), 1),
        "final_loss": round(statistics.fmean(losses[-50:]), 4) if losses else None,
        "trainable_parameters": sum(p.numel() for p in params),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_tokens": tokens + int(previous.get("train_tokens", 0)),
        "train_flops": float(flops_per_token * tokens) + float(previous.get("train_flops", 0.0)),
        "answers": answers,
    }
    if previous:
        record["runs"] = [
            *previous.get("runs", [{k: previous[k] for k in ("steps", "wall_s", "spec")}]),
            {"steps": step, "wall_s": round(wall, 1), "spec": asdict(spec),
             "continued_from_step": offset},
        ]  # fmt: skip
    (work / f"{role}.record.json").write_text(json.dumps(record), encoding="utf-8")
    log.close()
    return record


# -- the whole run -----------------------------------------------------------------------------


GATES: dict[str, Gates] = {
    "v1": Gates(),
    "v2": Gates(min_gap=0.08, min_chance_factor=None),
    "v3": Gates(min_gap=0.08, min_chance_factor=None),
    "v4": Gates(min_gap=0.08, min_chance_factor=None),
}
"""The short-answer gates per task (v2, v3 and v4 add the transfer gates of
:mod:`mai_graph.pair.gates`)."""


def check_gates(
    stats: dict[str, Any], speed_ratio: float | None, gates: Gates = Gates()
) -> list[tuple[str, bool, str]]:
    """The gates as ``(name, passed, detail)``, from :func:`heldout_stats` and the speed ratio.

    >>> stats = heldout_stats(["count"] * 4, [True, False, False, True], [True] * 4,
    ...                       [True, False, False, True])
    >>> check_gates(stats, 3.0)[0]
    ('large beats small by >= 10 points', True, 'large 100.0% vs small 50.0% (+50.0)')
    """
    small, large = stats["small"]["accuracy"], stats["large"]["accuracy"]
    chance, agreement = stats["chance"], stats["agreement"]
    agreed = agreement["accuracy_when_agree"]
    listed: list[tuple[str, bool, str] | None] = [
        (
            f"large beats small by >= {100 * gates.min_gap:.0f} points",
            large - small >= gates.min_gap - 1e-9,
            f"large {100 * large:.1f}% vs small {100 * small:.1f}% ({100 * (large - small):+.1f})",
        ),
        (
            f"small >= {gates.min_chance_factor:g}x chance",
            small >= gates.min_chance_factor * chance - 1e-9,
            f"small {100 * small:.1f}% vs chance {100 * chance:.1f}% ({small / chance:.2f}x)",
        )
        if gates.min_chance_factor is not None
        else None,
        (
            "accuracy when they agree >= large overall",
            agreement["share"] > 0 and agreed >= large - 1e-9,
            f"{100 * agreed:.1f}% on the {100 * agreement['share']:.1f}% they agree vs large "
            f"{100 * large:.1f}%",
        ),
    ]
    out: list[tuple[str, bool, str]] = [g for g in listed if g is not None]
    name = f"large >= {gates.min_speed_ratio:g}x slower per token"
    if speed_ratio is None:
        out.append((name, False, "not measured"))
    else:
        out.append((name, speed_ratio >= gates.min_speed_ratio, f"{speed_ratio:.2f}x"))
    return out


def _share(flags: Sequence[bool]) -> float:
    return round(sum(flags) / len(flags), 4) if flags else 0.0


def heldout_stats(
    templates: Sequence[str],
    small_ok: Sequence[bool],
    large_ok: Sequence[bool],
    agree: Sequence[bool],
) -> dict[str, Any]:
    """Accuracies (overall and per template) and agreement statistics of the two models.

    ``agree`` says, per item, whether the two short answers agree under the graph's rule.
    """

    def per_template(ok: Sequence[bool]) -> dict[str, float]:
        by: dict[str, list[bool]] = {}
        for t, good in zip(templates, ok):
            by.setdefault(t, []).append(good)
        return {t: _share(v) for t, v in sorted(by.items())}

    apart = [i for i, same in enumerate(agree) if not same]
    together = [i for i, same in enumerate(agree) if same]
    return {
        "chance": round(chance_accuracy(sorted(set(templates))), 4),
        "small": {"accuracy": _share(small_ok), "by_template": per_template(small_ok)},
        "large": {"accuracy": _share(large_ok), "by_template": per_template(large_ok)},
        "agreement": {
            "share": _share(agree),
            "accuracy_when_agree": _share([large_ok[i] for i in together]),
            "small_right_when_disagree": _share([small_ok[i] for i in apart]),
            "large_right_when_disagree": _share([large_ok[i] for i in apart]),
            "both_wrong_when_disagree": _share(
                [not small_ok[i] and not large_ok[i] for i in apart]
            ),
        },
    }


def _claim(work: Path, flag: str = "--work") -> Any:
    """Hold ``WORK.lock`` (beside the scratch folder) for as long as the returned file is open.

    Two runs on one scratch folder would write the same models, records and progress logs;
    the second is refused instead. ``flag`` names what placed the folder (``OUT`` or
    ``--work``) in the error when the lock cannot be written.
    """
    import fcntl

    lock = work.parent / f"{work.name}.lock"
    try:
        work.parent.mkdir(parents=True, exist_ok=True)
        fh = lock.open("a+")
    except OSError as exc:
        raise ConfigError(
            f"{flag}: cannot write the scratch folder's lock {lock} ({exc.strerror or exc})",
            parameter=flag,
            value=str(work),
            fix="give a folder this user can create and write",
        ) from None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise ConfigError(
            f"another train-pair run is using the scratch folder {work}",
            parameter="--work",
            value=str(work),
            fix="wait for it to finish (or stop it), or give this run another OUT or --work",
        ) from None
    return fh


@contextlib.contextmanager
def _file_lock(path: str | None) -> Iterator[None]:
    if not path:
        yield
        return
    import fcntl

    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def measure_speed(
    small: Path, large: Path, *, engine: str = "vllm", runs: int = 5
) -> dict[str, Any]:
    """Per-token decode time of each model alone on ``engine`` (median of ``runs``).

    Each model generates 1 and then 65 tokens for the same picture question; the per-token time
    is the difference over 64. The engines start one after the other.
    """
    import asyncio

    from PIL import Image

    from mai_graph.backends.base import GenerationRequest
    from mai_graph.backends.lifecycle import shutdown_backends
    from mai_graph.calls import Question, cot_request
    from mai_graph.deploy.select import backends_for
    from mai_graph.inputs.sources import image_ref
    from mai_graph.pair.task import CONTEXT

    ref = image_ref(Image.new("RGB", (128, 128), (255, 255, 255)))
    q = Question(question="How many shapes are there?", image=ref, options=None, kind="number")
    messages = cot_request(q, CONTEXT).messages

    async def one(backend: Any) -> dict[str, float]:
        await backend.start()
        times: dict[int, float] = {}
        for n in (1, 65):
            runs_s = []
            for _ in range(runs):
                req = GenerationRequest(messages, max_tokens=n, min_tokens=n, purpose="generate")
                runs_s.append((await backend.generate(req)).latency_s)
            times[n] = statistics.median(runs_s)
        per_token = 1000 * (times[65] - times[1]) / 64
        return {"first_token_ms": round(1000 * times[1], 3), "per_token_ms": round(per_token, 3)}

    out: dict[str, Any] = {"engine": engine, "runs": runs}
    pair = backends_for(engine, str(small), str(large))
    for role, backend in zip(("small", "large"), pair):
        try:
            out[role] = asyncio.run(one(backend))
        finally:
            shutdown_backends(backend)
    out["ratio"] = round(out["large"]["per_token_ms"] / out["small"]["per_token_ms"], 3)
    return out


def _spawn(
    role: str,
    work: Path,
    out: Path,
    *,
    seed: int,
    heldout: int,
    heldout_seed: int,
    task: str,
    minutes: Sequence[float],
    steps: Sequence[int],
    init_from: str | Path | None,
    lr_scale: float,
) -> subprocess.Popen[bytes]:
    """Start the training of ``role`` in a child process (``python -m mai_graph.cli.train``)."""
    cmd = [
        sys.executable, "-m", "mai_graph.cli.train", str(out), "--child", role,
        "--work", str(work), "--seed", str(seed), "--heldout", str(heldout),
        "--heldout-seed", str(heldout_seed), "--task", task,
    ]  # fmt: skip
    if steps:
        cmd += ["--steps", str(steps[0] if role == "small" else steps[-1])]
    else:
        cmd += ["--minutes", str(minutes[0] if role == "small" else minutes[-1])]
    if init_from:
        cmd += ["--init-from", str(init_from)]
    if lr_scale != 1.0:
        cmd += ["--lr-scale", str(lr_scale)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    err = (work / f"{role}.stderr").open("wb")
    return subprocess.Popen(cmd, env=env, stdout=err, stderr=err, preexec_fn=lambda: os.nice(19))


def _follow(procs: dict[str, subprocess.Popen[bytes]], work: Path) -> None:
    """Print the children's progress lines until both exit."""
    seen = dict.fromkeys(procs, 0)
    while True:
        running = any(p.poll() is None for p in procs.values())
        for role in procs:
            path = work / f"{role}.log.jsonl"
            # complete lines only: a child may be writing the last one
            lines = path.read_text().split("\n")[:-1] if path.exists() else []
            for line in lines[seen[role] :]:
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:  # a progress line is not worth the run
                    print(f"  {role:<5} (unreadable progress line in {path.name})", flush=True)
                    continue
                per = " ".join(f"{t[:3]} {100 * a:.0f}" for t, a in
                               e.get("monitor_by_template", {}).items())  # fmt: skip
                print(f"  {role:<5} step {e['step']:>6}  {e['elapsed_s']:>6.0f} s  loss "
                      f"{e['loss']:.3f}  monitor {100 * e['monitor_accuracy']:.1f}% ({per})",
                      flush=True)  # fmt: skip
            seen[role] = len(lines)
        if not running:
            return
        time.sleep(5)


def _report(stats: dict[str, Any], gates: list[tuple[str, bool, str]]) -> None:
    h = stats["heldout"]
    print(f"\nheld-out short answers ({h['n']} items, seed {h['seed']}):")
    for role in ("small", "large"):
        per = ", ".join(f"{t} {100 * a:.0f}%" for t, a in stats[role]["by_template"].items())
        print(f"  {role:<5} {100 * stats[role]['accuracy']:.1f}%  ({per})")
    a = stats["agreement"]
    print(f"  agree on {100 * a['share']:.1f}%, right {100 * a['accuracy_when_agree']:.1f}% of "
          "those; when they disagree the small is right "
          f"{100 * a['small_right_when_disagree']:.1f}%, the large "
          f"{100 * a['large_right_when_disagree']:.1f}%")  # fmt: skip
    print("\ngates:")
    for name, ok, detail in gates:
        print(f"  [{'pass' if ok else 'FAIL'}] {name}: {detail}")


def _gap_source(records: dict[str, Any], task: str = "v1") -> str:
    """Where the accuracy gap comes from, said plainly (capacity, and compute if unequal).

    The sizes are each model's as trained (its record), not the current specs.
    """

    def trained(role: str) -> PairSpec:
        spec = dict(records[role].get("spec") or {})
        if not spec:
            return specs_for(task)[role]
        return PairSpec(**{**spec, "tiny": TinySpec(**spec["tiny"])})

    s, g = trained("small"), trained("large")
    small, large = records["small"], records["large"]
    capacity = (
        f"capacity: the large model has {g.tiny.num_layers} layers of width "
        f"{g.tiny.hidden_size} against {s.tiny.num_layers} of {s.tiny.hidden_size} and sees "
        f"{g.image_side}x{g.image_side} pixels ({(g.image_side // 32) ** 2} visual tokens) "
        f"against {s.image_side}x{s.image_side} ({(s.image_side // 32) ** 2})"
    )
    ratio = large["train_flops"] / small["train_flops"]
    wall = large["wall_s"] / small["wall_s"]
    if wall > 1.2:
        return (
            f"{capacity}; and compute: the small model was trained less, "
            f"{small['wall_s'] / 60:.0f} min against {large['wall_s'] / 60:.0f} min of wall "
            f"time ({small['steps']} steps "
            f"against {large['steps']}), the large one used {ratio:.1f}x its training compute"
        )
    return (
        f"{capacity}. Both trained for the same wall time; each large step costs more, so the "
        f"large one took {large['steps']} steps to the small one's {small['steps']} and "
        f"{ratio:.1f}x its training compute"
    )


def train_pair(
    out: str | Path,
    *,
    minutes: Sequence[float] = (10.0, 32.0),
    steps: Sequence[int] | None = None,
    seed: int = 0,
    task: str = "v1",
    heldout: int = 1000,
    heldout_seed: int = 1000,
    speed: str = "vllm",
    engine_lock: str | None = None,
    eval_items: int = 0,
    eval_concurrency: int = 1,
    work: str | Path | None = None,
    save_anyway: bool = False,
    from_work: bool = False,
    retrain: str | None = None,
    init_from: str | Path | None = None,
    lr_scale: float = 1.0,
) -> int:
    """Tokenizer, two trainings, held-out scores, speed, gates; save when the gates hold.

    Args:
        out: Where to write ``small/``, ``large/`` and ``manifest.json``.
        minutes: Wall-time budget: one number for both models, or small and large.
        steps: Fixed steps instead of a time budget (one number, or small and large).
        seed: Seed of the data, initialization and order.
        task: ``v1`` (the first pair's task), ``v2`` (compositional questions) or ``v3``
            (arrows to follow: sequential steps).
        heldout: Held-out items to score.
        heldout_seed: Seed of the held-out items.
        speed: Engine that measures per-token speed (``vllm``, ``transformers``; ``skip``:
            the speed gate fails).
        engine_lock: A lock file to hold while engines run (shared machines).
        eval_items: Also evaluate every policy on this many held-out items on vLLM and check
            the reasoning and transfer gates (0: no).
        eval_concurrency: Runs in flight per policy in that evaluation (1: each run's latency
            is its own; the v2 and v3 manifests were measured with 8).
        work: Scratch folder (default ``OUT.work``).
        save_anyway: Save even if a gate fails.
        from_work: No training: score, measure and check the models already in ``work``.
        retrain: Train only this model (``small`` or ``large``) again, keeping the tokenizer
            and the other model in the scratch folder.
        init_from: Continue the models trained in this scratch folder or saved pair (with
            ``retrain``: only that one), their data streams going on where they stopped.
        lr_scale: Scale of the spec's learning rate.

    Returns:
        0 when the gates held (or ``save_anyway`` saved the pair), else 1.
    """
    from mai_graph.answers import answers_match
    from mai_graph.files import output_folder
    from mai_graph.pair.task import prompt_fingerprint

    minutes, steps = list(minutes), list(steps or [])

    asked = Path(out).expanduser()
    placed_by = "--work" if work else "OUT"
    work = Path(work).expanduser() if work else asked.with_name(asked.name + ".work")
    claim = _claim(work, placed_by)  # noqa: F841 (the lock is held until this function returns)
    out = output_folder(out, flag="OUT", what="trained pair",
                        owns=lambda f: (f / "manifest.json").is_file())  # fmt: skip
    if not (from_work or retrain):  # the scratch folder is emptied: only ours
        output_folder(work, flag="--work", what="training scratch folder",
                      owns=lambda f: (f / "tokenizer").is_dir())  # fmt: skip
    started = time.perf_counter()
    if from_work:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
        for role in ("small", "large"):  # the processors as this version builds them
            side = specs_for(task)[role].image_side
            build_processor(tokenizer, side).save_pretrained(work / role)
        print(f"scoring the models trained in {work} (no training)")
    else:
        roles = [retrain] if retrain else ["small", "large"]
        if init_from and not (work / "tokenizer").exists():
            source = Path(init_from)
            for role in ("small", "large"):  # refused before anything is copied or trained
                earlier_record(source, role)
            work.mkdir(parents=True, exist_ok=True)
            # A fresh scratch folder starts from the earlier run's tokenizer (and, with
            # --retrain, its other model).
            shutil.copytree(_tokenizer_folder(source), work / "tokenizer")
            for other in {"small", "large"} - set(roles):
                shutil.copytree(source / other, work / other)
                record = earlier_record(source, other)
                (work / f"{other}.record.json").write_text(json.dumps(record), encoding="utf-8")
        if retrain or init_from:  # keep the tokenizer (and the other model) of the folder
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
        else:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            tokenizer = build_tokenizer(task)
            tokenizer.save_pretrained(work / "tokenizer")
        budget = (
            f"steps: small {steps[0]}, large {steps[-1]}"
            if steps
            else f"small {minutes[0]:g} min, large {minutes[-1]:g} min"
        )
        print(f"tokenizer: {len(tokenizer)} tokens")
        print(f"training {' and '.join(roles)} ({budget}, one thread each, niced); "
              f"logs in {work}")  # fmt: skip
        procs = {
            role: _spawn(
                role, work, out, seed=seed, heldout=heldout, heldout_seed=heldout_seed,
                task=task, minutes=minutes, steps=steps, init_from=init_from, lr_scale=lr_scale,
            )
            for role in roles
        }  # fmt: skip
        _follow(procs, work)
        for role, proc in procs.items():
            if proc.returncode != 0:
                tail = (work / f"{role}.stderr").read_text(errors="replace")[-3000:]
                print(f"{role} training failed (exit {proc.returncode}):\n{tail}")
                return 1
    records = {r: json.loads((work / f"{r}.record.json").read_text()) for r in ("small", "large")}
    items = heldout_items(heldout, seed=heldout_seed, task=task)
    answers = {
        r: records[r].pop("answers", None)
        or _short_answers(
            work / r, build_processor(tokenizer, specs_for(task)[r].image_side), tokenizer, items
        )
        for r in records
    }  # a model taken over from a saved pair was not scored by its own training
    agree = [
        answers_match(a, b, it.row["kind"], options=it.row.get("options"))
        for it, a, b in zip(items, answers["small"], answers["large"])
    ]
    stats = heldout_stats(
        [it.template for it in items],
        score_answers(items, answers["small"]),
        score_answers(items, answers["large"]),
        agree,
    )
    stats = {
        "heldout": {"n": len(items), "seed": heldout_seed,
                    "generator": "mai_graph.eval.synthetic", "answers": "greedy short answers, "
                    "transformers, bf16 weights computed in fp32"},
        **stats,
    }  # fmt: skip
    timing: dict[str, Any] | None = None
    if speed != "skip":
        print(f"measuring per-token speed on {speed} (engines one after the other) ...")
        with _file_lock(engine_lock):
            timing = measure_speed(work / "small", work / "large", engine=speed)
        print(f"  small {timing['small']['per_token_ms']:.2f} ms/token, large "
              f"{timing['large']['per_token_ms']:.2f} ms/token "
              f"({timing['ratio']:.2f}x)")  # fmt: skip
    gates = check_gates(stats, timing["ratio"] if timing else None, GATES[task])
    evaluation: dict[str, Any] | None = None
    if eval_items:
        from mai_graph.pair.gates import (
            TRANSFER_GATES,
            TransferGates,
            check_transfer_gates,
            evaluate_pair,
            summary,
        )

        print(f"evaluating every policy on {eval_items} held-out items on vllm "
              "(branches, masked transfer, CircularEval) ...")  # fmt: skip
        shutil.rmtree(work / "eval", ignore_errors=True)
        with _file_lock(engine_lock):
            result = evaluate_pair(
                work / "small", work / "large", work / "eval",
                n=eval_items, seed=heldout_seed, task=task, concurrency=eval_concurrency,
            )  # fmt: skip
        gates += check_transfer_gates(result, TRANSFER_GATES.get(task, TransferGates()))
        evaluation = summary(result)
    _report(stats, gates)
    passed = all(ok for _, ok, _ in gates)
    if not passed and not save_anyway:
        print(f"\nnot saved: a gate failed (the models are in {work})")
        return 1
    compute = {r: records[r]["train_flops"] for r in records}
    manifest = {
        "what": "a toy pair of tiny Qwen3-VL models trained on mai-graph's synthetic task",
        "trainer_version": TRAINER_VERSION,
        "task": task,
        "seed": seed,
        "budget": None  # no training in this run: each model's record lists its own runs
        if from_work
        else {
            "minutes": None if steps else dict(zip(("small", "large"), minutes * 2)),
            "steps": dict(zip(("small", "large"), steps * 2)) if steps else None,
        },
        "run_wall_s": None if from_work else round(time.perf_counter() - started, 1),
        "models": records,
        "compute_ratio_large_over_small": round(compute["large"] / compute["small"], 2),
        "gap_source": _gap_source(records, task),
        "tokenizer_tokens": len(tokenizer),
        "prompt_fingerprint": prompt_fingerprint(tokenizer, task),
        **stats,
        "speed": timing,
        "evaluation": evaluation,
        "gates": [{"name": g, "passed": ok, "detail": d} for g, ok, d in gates],
        "gates_passed": passed,
    }
    out.mkdir(parents=True, exist_ok=True)
    for role in ("small", "large"):
        shutil.rmtree(out / role, ignore_errors=True)
        shutil.copytree(work / role, out / role)
    manifest["checksums"] = file_checksums(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    print(f"\nsaved: {out / 'small'}, {out / 'large'}, {out / 'manifest.json'}")
    return 0 if passed else 1
