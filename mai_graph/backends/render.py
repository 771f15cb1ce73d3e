"""Chat rendering to token ids, shared by the in-process backends (vLLM, transformers).

Prompts are rendered with the model's own chat template and tokenized here, so every request is
sent as token ids with the image placeholder unexpanded. An assistant turn that carries its
generated ``token_ids`` is spliced in verbatim: the S2 prompt then starts with exactly the ids
the engine already holds in its prefix / KV cache (re-tokenizing generated text would differ).

This is deliberate, not a stand-in for a library: neither vLLM's chat entry points nor
transformers' ``apply_chat_template`` take token ids for a turn, and without the splice the S2
turn and the transfer answer would re-read the whole reasoning instead of hitting the cache.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mai_graph.errors import ConfigError
from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.video import VideoRef
from mai_graph.messages import Message, Part

__all__ = [
    "RenderedPrompt",
    "common_prefix",
    "control_literals",
    "encode_as_text",
    "hf_messages",
    "render",
    "vocab_fingerprint",
]


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """Token ids of a prompt (image and video placeholders unexpanded), its media in order."""

    token_ids: list[int]
    images: list[ImageRef]
    spans: list[tuple[int, int]]
    """Where each spliced id sequence sits in ``token_ids`` (start, end), in prompt order."""
    videos: list[VideoRef] = field(default_factory=list)

    @property
    def spliced(self) -> bool:
        """True when some generated or selected ids were reused verbatim."""
        return bool(self.spans)


def hf_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the Hugging Face chat-template format (``image`` and ``video`` parts)."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        for p in m["content"]:
            if p["type"] == "image":
                parts.append({"type": "image"})
            elif p["type"] == "video":
                parts.append({"type": "video"})
            else:
                parts.append({"type": "text", "text": p["text"]})
        out.append({"role": m["role"], "content": parts})
    return out


SHORT_PURPOSES = frozenset({"short", "s2", "answer"})
"""Calls that want an answer, not reasoning: rendered with ``enable_thinking=False``, which
thinking templates (Qwen3's convention) read as "answer without a think block" and other
templates ignore."""


def thinking_for(purpose: str) -> bool:
    """Whether a call of ``purpose`` may think (``False`` for the short-answer calls).

    >>> thinking_for("cot"), thinking_for("short")
    (True, False)
    """
    return purpose not in SHORT_PURPOSES


def _template(
    template: Any, messages: Sequence[Message], *, generation_prompt: bool, thinking: bool = True
) -> str:
    options: dict[str, Any] = {} if thinking else {"enable_thinking": False}
    try:
        text = template.apply_chat_template(
            hf_messages(messages),
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **options,
        )
    except Exception as exc:
        raise ConfigError(
            f"the model's chat template failed to render the prompt: {exc}",
            parameter="chat_template",
            fix="use a chat (instruct) checkpoint whose template accepts image and text parts",
        ) from exc
    return str(text)


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _sentinel(k: int) -> str:
    return f"\ue000{k}\ue001"


_SENTINEL = re.compile("\ue000(\\d+)\ue001")


def render(
    tokenizer: Any,
    messages: Sequence[Message],
    eos_token_ids: set[int],
    *,
    template: Any = None,
    thinking: bool = True,
) -> RenderedPrompt:
    """Render and tokenize ``messages``, ending with the assistant generation prompt.

    Token ids carried by the messages are spliced in verbatim: an assistant turn's
    ``token_ids`` (what the model generated) and a text part's ``token_ids`` (e.g. the kept
    reasoning tokens). Their text is swapped for a placeholder while rendering, and the rendered
    text around each placeholder is tokenized on its own, so the ids before a splice are exactly
    the ids of the prompt that produced it.

    Args:
        tokenizer: A Hugging Face tokenizer (encodes the rendered text).
        messages: The conversation.
        eos_token_ids: End-of-turn ids the engine may leave at the end of generated ids.
        template: What renders the chat template: the model's processor (vision models keep
            their template there), default the tokenizer.
        thinking: ``False`` renders with ``enable_thinking=False`` (see :func:`thinking_for`).
    """
    template = template if template is not None else tokenizer
    images = [p["image"] for m in messages for p in m["content"] if p["type"] == "image"]
    videos = [p["video"] for m in messages for p in m["content"] if p["type"] == "video"]
    pieces: list[list[int]] = []
    literal: set[int] = set()  # pieces that are caller text holding control-token literals
    controls = control_literals(tokenizer)
    marked: list[Message] = []
    for m in messages:
        ids = m.get("token_ids")
        if m["role"] == "assistant" and ids:
            pieces.append(_defused(ids, tokenizer))
            marked.append({"role": "assistant", "content": [_text(_sentinel(len(pieces) - 1))]})
            continue
        content: list[Part] = []
        for part in m["content"]:
            part_ids = part.get("token_ids") if part["type"] == "text" else None
            if part_ids:
                pieces.append(_defused(part_ids, tokenizer))
                content.append(_text(_sentinel(len(pieces) - 1)))
            elif part["type"] == "text" and _holds_control(part["text"], controls):
                # Caller text reaches the model as text: a literal "<|im_start|>" in it is
                # encoded as its characters, never as the control token (no forged turns).
                literal.add(len(pieces))
                pieces.append(encode_as_text(tokenizer, part["text"]))
                content.append(_text(_sentinel(len(pieces) - 1)))
            else:
                content.append(part)
        marked.append({"role": m["role"], "content": content})
    if not pieces:
        full = _template(template, messages, generation_prompt=True, thinking=thinking)
        return RenderedPrompt(_encode(tokenizer, full), images, [], videos)
    rendered = _template(template, marked, generation_prompt=True, thinking=thinking)
    chunks = _SENTINEL.split(rendered)
    found = [int(k) for k in chunks[1::2]]
    if found != list(range(len(pieces))):  # the template rewrote a turn: no exact splice
        if literal:
            raise ConfigError(
                "the model's chat template rewrote a turn whose text holds control-token "
                "literals (such as <|im_start|>), so it cannot be sent as plain text",
                parameter="messages",
                fix="remove the special-token markup from the question, options or messages",
            )
        full = _template(template, messages, generation_prompt=True, thinking=thinking)
        return RenderedPrompt(_encode(tokenizer, full), images, [], videos)
    token_ids = _encode(tokenizer, _opening(template, marked, chunks[0]))
    spans = []
    for k, ids in enumerate(pieces):
        tail = chunks[2 * k + 2]
        if k not in literal and ids and ids[-1] in eos_token_ids:
            # The engine kept the end-of-turn token; drop its text twin from what follows.
            eos_text = tokenizer.decode([ids[-1]])
            if tail.startswith(eos_text):
                tail = tail[len(eos_text) :]
        if k not in literal:
            spans.append((len(token_ids), len(token_ids) + len(ids)))
        token_ids += ids + _encode(tokenizer, tail)
    return RenderedPrompt(token_ids, images, spans, videos)


_CONTROLS: dict[int, tuple[str, ...]] = {}
_MARKUP_TOKEN = re.compile(r"<[^<>\s]{1,64}>")


def control_literals(tokenizer: Any) -> tuple[str, ...]:
    """The control tokens a tokenizer matches whole in text (``<|im_start|>``, ``<think>``, ...).

    Added tokens are matched in text before the BPE runs, so caller text holding one of these
    would become that control token. Controls are the special tokens and every added token
    spelled as markup (``<...>``); an added ordinary word (a domain vocabulary entry) is not.
    """
    key = id(tokenizer)
    if key not in _CONTROLS:
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        found = {
            str(getattr(t, "content", t))
            for t in added.values()
            if getattr(t, "special", True) or _MARKUP_TOKEN.fullmatch(str(t.content))
        }
        found |= {str(t) for t in getattr(tokenizer, "all_special_tokens", ()) or ()}
        _CONTROLS[key] = tuple(sorted((t for t in found if t), key=len, reverse=True))
    return _CONTROLS[key]


def _holds_control(text: str, controls: Sequence[str]) -> bool:
    return any(c in text for c in controls)


def encode_as_text(tokenizer: Any, text: str) -> list[int]:
    """``text``'s ids with every control-token literal in it encoded as plain characters.

    Fast tokenizers' ``split_special_tokens`` splits the special ones; an added token that is
    not special (some checkpoints add ``<think>`` so) is encoded piece by piece around it.
    """
    try:
        ids = list(
            tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        )
    except TypeError:  # a tokenizer without the option: split around every literal below
        ids = _encode(tokenizer, text)
    controls = control_literals(tokenizer)
    control_ids = {tokenizer.convert_tokens_to_ids(c) for c in controls}
    if not control_ids.intersection(ids):
        return ids
    out: list[int] = []
    for chunk in re.split("(" + "|".join(map(re.escape, controls)) + ")", text):
        if not chunk:
            continue
        if chunk in controls:  # byte by byte: no merge can rebuild the added token
            for ch in chunk:
                out += [i for i in _encode(tokenizer, ch) if i not in control_ids]
        else:
            out += _encode(tokenizer, chunk)
    return out


def _opening(template: Any, marked: Sequence[Message], before: str) -> str:
    """The text before the first splice, as the call that generated it saw it.

    When the first splice is an assistant turn (S2 over a chain of thought), its ids were
    generated after the template's generation prompt, which may say more than the turn's
    header: a thinking template opens ``<think>``. The prompt of that earlier call (the turns
    before, with the generation prompt, thinking on) is then the exact prefix, so the engine's
    cache serves it and the model reads its reasoning as it wrote it.
    """
    first = next(
        (i for i, m in enumerate(marked) if _SENTINEL.search(str(m["content"][0].get("text", "")))),
        None,
    )
    if first is None or marked[first]["role"] != "assistant" or first == 0:
        return before
    try:
        earlier = _template(template, marked[:first], generation_prompt=True, thinking=True)
    except ConfigError:
        return before
    return earlier if earlier.startswith(before) else before


_MEDIA_TOKENS = ("<|image_pad|>", "<|video_pad|>")
"""Qwen-VL's placeholders: engines expand each into an image's or a video's tokens."""
_MEDIA_IDS: dict[int, frozenset[int]] = {}


def media_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the tokens that stand for media in a prompt (Qwen-VL's placeholders), if any.

    A model may *generate* one of them (random weights do, when sampling); spliced into a later
    prompt it would read as one more image, so spliced ids replace them (:func:`_defused`).
    """
    key = id(tokenizer)
    if key not in _MEDIA_IDS:
        unk = getattr(tokenizer, "unk_token_id", None)
        ids = {tokenizer.convert_tokens_to_ids(t) for t in _MEDIA_TOKENS}
        _MEDIA_IDS[key] = frozenset(i for i in ids if isinstance(i, int) and i != unk)
    return _MEDIA_IDS[key]


def _defused(ids: Sequence[int], tokenizer: Any) -> list[int]:
    """``ids`` with media tokens replaced by the pad token; without a pad token, dropped.

    Replacing keeps positions, so the spliced span still lines up with the reasoning's tokens.
    """
    banned = media_ids(tokenizer)
    if not banned or not banned.intersection(ids):
        return list(ids)
    pad = getattr(tokenizer, "pad_token_id", None)
    if isinstance(pad, int) and pad not in banned:
        return [pad if i in banned else i for i in ids]
    return [i for i in ids if i not in banned]


def _text(text: str) -> Part:
    return {"type": "text", "text": text}


def vocab_fingerprint(tokenizer: Any) -> str:
    """Hash of a tokenizer's vocabulary: equal when token ids mean the same text."""
    vocab = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(repr(vocab).encode()).hexdigest()[:16]


def common_prefix(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """How many leading items (token ids, token texts) two sequences share.

    The one longest-common-prefix helper: prefix-cache accounting in every backend uses it.

    >>> common_prefix([1, 2, 3], [1, 2, 4, 5])
    2
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
