"""Chat rendering to token ids, shared by the in-process backends (vLLM, transformers).

Prompts are rendered with the model's own chat template and tokenized here, so every request is
sent as token ids with the image placeholder unexpanded. An assistant turn that carries its
generated ``token_ids`` is spliced in verbatim: the S2 prompt then starts with exactly the ids
the engine already holds in its prefix / KV cache (re-tokenizing generated text would differ).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mai_graph.backends.base import Message
from mai_graph.errors import ConfigError
from mai_graph.images import ImageRef

__all__ = ["RenderedPrompt", "hf_messages", "render"]


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """Token ids of a prompt (image placeholders unexpanded) and its images in order."""

    token_ids: list[int]
    images: list[ImageRef]
    spliced: bool
    """True when an assistant turn's generated ids were reused verbatim."""


def hf_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages in the Hugging Face chat-template format (``{"type": "image"}`` parts)."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        for p in m["content"]:
            if p["type"] == "image":
                parts.append({"type": "image"})
            else:
                parts.append({"type": "text", "text": p["text"]})
        out.append({"role": m["role"], "content": parts})
    return out


def _template(template: Any, messages: Sequence[Message], *, generation_prompt: bool) -> str:
    try:
        text = template.apply_chat_template(
            hf_messages(messages), tokenize=False, add_generation_prompt=generation_prompt
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


def render(
    tokenizer: Any,
    messages: Sequence[Message],
    eos_token_ids: set[int],
    *,
    template: Any = None,
) -> RenderedPrompt:
    """Render and tokenize ``messages``, ending with the assistant generation prompt.

    Args:
        tokenizer: A Hugging Face tokenizer (encodes the rendered text).
        messages: The conversation.
        eos_token_ids: End-of-turn ids the engine may leave at the end of generated ids.
        template: What renders the chat template: the model's processor (vision models keep
            their template there), default the tokenizer.
    """
    template = template if template is not None else tokenizer
    images = [p["image"] for m in messages for p in m["content"] if p["type"] == "image"]
    last_gen = max(
        (i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("token_ids")),
        default=None,
    )
    full = _template(template, messages, generation_prompt=True)
    if last_gen is not None:
        head = _template(template, messages[:last_gen], generation_prompt=True)
        generated = messages[last_gen]
        text = "".join(p["text"] for p in generated["content"] if p["type"] == "text")
        if full.startswith(head + text):
            ids = list(generated["token_ids"])
            suffix = full[len(head) + len(text) :]
            if ids and ids[-1] in eos_token_ids:
                # The engine kept the end-of-turn token; drop its text twin from the suffix.
                eos_text = tokenizer.decode([ids[-1]])
                if suffix.startswith(eos_text):
                    suffix = suffix[len(eos_text) :]
            token_ids = _encode(tokenizer, head) + ids + _encode(tokenizer, suffix)
            return RenderedPrompt(token_ids, images, spliced=True)
    return RenderedPrompt(_encode(tokenizer, full), images, spliced=False)
