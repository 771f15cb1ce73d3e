"""Prompt builders. Shared prefixes come first so the engines' prefix caches hit.

Every prompt is ``system, [images..., video, question block, <varying part>]``: the short
answer, the chain of thought and the transfer prompt differ only after the question block, and
the S2 prompt is the chain-of-thought conversation with one more turn appended. Images keep
the order they were given in, and come before the video; with media first and identical in
every call, each engine's prefix cache serves them to every later call of a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from mai_graph.answers import AnswerKind, Options
from mai_graph.context import MAIContext
from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.video import VideoRef
from mai_graph.messages import Message, Part, TextPart

Images = ImageRef | Sequence[ImageRef] | None
"""The images of a prompt: one, several in order, or none."""

__all__ = [
    "SYSTEM_PROMPT",
    "Images",
    "cot_messages",
    "option_letters",
    "question_block",
    "s2_messages",
    "short_instruction",
    "short_messages",
    "transfer_messages",
]

SYSTEM_PROMPT = (
    "You are a careful assistant that answers questions about images. "
    "Look at the image closely and follow the answer format you are asked for."
)
COT_INSTRUCTION = (
    "Think step by step: describe what in the image matters for the question, reason about it, "
    "then state the final answer."
)
S2_INSTRUCTION = "Based on your reasoning above, give only the final answer."
TRANSFER_PREAMBLE = (
    "Key points from another assistant's reasoning about this question (selected words, in "
    "order; they may be incomplete):\n"
)
TRANSFERS_PREAMBLE = (
    "Key points from {n} other assistants' reasoning about this question (selected words, in "
    "order; they may be incomplete):\n"
)
_FORMATS: dict[str, str] = {
    "choice": "Answer with the option's letter only.",
    "yes_no": "Answer with yes or no only.",
    "number": "Answer with a number only.",
    "text": "Answer with a single word or a short phrase.",
    "auto": "Answer with a single word or a short phrase.",
}


def option_letters(options: Options | None) -> tuple[str, ...]:
    """Letters of the options: a mapping's own keys, or ``A``, ``B``, ... for a list.

    >>> option_letters(["cat", "dog"]), option_letters({"B": "cat", "C": "dog"})
    (('A', 'B'), ('B', 'C'))
    """
    if isinstance(options, Mapping):
        return tuple(options)
    return tuple(chr(ord("A") + i) for i in range(len(options or ())))


def question_block(question: str, options: Options | None) -> str:
    r"""The question and its lettered options, ending in a newline.

    ``options`` maps letters to texts (kept in order), or lists texts lettered A, B, ...

    >>> question_block("Which pet?", {"A": "cat", "C": "dog"})
    'Question: Which pet?\nOptions:\nA. cat\nC. dog\n'
    >>> question_block("Q?", ["cat", "dog"]) == question_block("Q?", {"A": "cat", "B": "dog"})
    True
    """
    text = f"Question: {question.strip()}\n"
    if options:
        texts = options.values() if isinstance(options, Mapping) else options
        lines = "".join(f"{k}. {o}\n" for k, o in zip(option_letters(options), texts))
        text += "Options:\n" + lines
    return text


def short_instruction(ctx: MAIContext, kind: AnswerKind) -> str:
    """The short-answer instruction for an answer kind (or the context's override)."""
    return ctx.short_instruction or _FORMATS[kind]


def _head(
    ctx: MAIContext,
    image: Images,
    question: str,
    options: Options | None,
    videos: Sequence[VideoRef] = (),
) -> tuple[Message, list[Part]]:
    system: Message = {
        "role": "system",
        "content": [{"type": "text", "text": ctx.system_prompt or SYSTEM_PROMPT}],
    }
    parts: list[Part] = []
    if image is not None:
        if isinstance(image, tuple | list):
            parts.extend({"type": "image", "image": ref} for ref in image)
        else:
            parts.append({"type": "image", "image": cast(ImageRef, image)})
    parts.extend({"type": "video", "video": video} for video in videos)
    parts.append({"type": "text", "text": question_block(question, options)})
    return system, parts


def short_messages(
    ctx: MAIContext,
    image: Images,
    question: str,
    options: Options | None,
    kind: AnswerKind,
    videos: Sequence[VideoRef] = (),
) -> tuple[Message, ...]:
    """Prompt for a short answer (mutual verification and baselines)."""
    system, parts = _head(ctx, image, question, options, videos)
    parts.append({"type": "text", "text": short_instruction(ctx, kind)})
    return system, {"role": "user", "content": parts}


def cot_messages(
    ctx: MAIContext,
    image: Images,
    question: str,
    options: Options | None,
    videos: Sequence[VideoRef] = (),
) -> tuple[Message, ...]:
    """Prompt for the chain of thought."""
    system, parts = _head(ctx, image, question, options, videos)
    parts.append({"type": "text", "text": ctx.cot_instruction or COT_INSTRUCTION})
    return system, {"role": "user", "content": parts}


def s2_messages(
    ctx: MAIContext,
    cot: Sequence[Message],
    reasoning: str,
    reasoning_token_ids: Sequence[int] | None,
    kind: AnswerKind,
) -> tuple[Message, ...]:
    """The CoT conversation plus its answer and one more turn asking for the final answer only.

    The reasoning's exact token ids ride along so backends can continue from the cached prefix.
    """
    assistant: Message = {"role": "assistant", "content": [{"type": "text", "text": reasoning}]}
    if reasoning_token_ids:
        assistant["token_ids"] = list(reasoning_token_ids)
    instruction = f"{ctx.s2_instruction or S2_INSTRUCTION} {short_instruction(ctx, kind)}"
    turn: Message = {"role": "user", "content": [{"type": "text", "text": instruction}]}
    return (*cot, assistant, turn)


def transfer_messages(
    ctx: MAIContext,
    image: Images,
    question: str,
    options: Options | None,
    kind: AnswerKind,
    transfer: str | Sequence[tuple[str, Sequence[int] | None]],
    transfer_token_ids: Sequence[int] | None = None,
    videos: Sequence[VideoRef] = (),
) -> tuple[Message, ...]:
    """The large model's final prompt: its verify prefix, the transferred reasoning, the ask.

    With ``transfer_token_ids`` the kept tokens travel as ids (small and large share a
    tokenizer), so the large model reads exactly the tokens that were selected. ``transfer``
    may also be several ``(text, token_ids)`` pieces (the best drafts' reasonings, best first),
    each shown as a numbered item.
    """
    system, parts = _head(ctx, image, question, options, videos)
    if isinstance(transfer, str):
        parts.append({"type": "text", "text": ctx.transfer_preamble or TRANSFER_PREAMBLE})
        parts.append(_kept(transfer, transfer_token_ids))
    else:
        preamble = ctx.transfer_preamble or TRANSFERS_PREAMBLE.format(n=len(transfer))
        parts.append({"type": "text", "text": preamble})
        for i, (text, ids) in enumerate(transfer, start=1):
            parts.append({"type": "text", "text": ("" if i == 1 else "\n") + f"[{i}] "})
            parts.append(_kept(text, ids))
    parts.append({"type": "text", "text": "\n" + short_instruction(ctx, kind)})
    return system, {"role": "user", "content": parts}


def _kept(text: str, token_ids: Sequence[int] | None) -> TextPart:
    kept: TextPart = {"type": "text", "text": text.strip()}
    if token_ids:
        kept["token_ids"] = list(token_ids)
    return kept
