"""The explicit decode loop: sampling, ``min_tokens``, stop conditions, choices, streamed text.

The loop is independent of the model: it takes the prompt's last logits and a ``step`` function
that feeds one token and returns the next logits, so the backend owns the model and its cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mai_graph.backends.base import GenerationRequest, TextCallback

if TYPE_CHECKING:
    import torch

__all__ = [
    "ChoiceTrie",
    "Decoded",
    "FinishReason",
    "StreamDetokenizer",
    "decode",
    "final_text",
    "make_generator",
]

FinishReason = Literal["stop", "length", "abort"]
"""Why decoding ended.

- ``stop``: an end-of-turn token, a stop string, or a complete choice.
- ``length``: ``max_tokens`` reached.
- ``abort``: the request was cancelled.
"""

Step = Callable[[int], "torch.Tensor"]
"""Feeds one generated token to the model and returns the next token's logits (1-D)."""


class ChoiceTrie:
    """Token-level prefix constraint: the output must be exactly one of the choices.

    Args:
        tokenizer: Encodes each choice (without special tokens).
        choices: The allowed outputs.
        eos: End-of-turn ids, allowed once no choice continues the output.
    """

    def __init__(self, tokenizer: Any, choices: Sequence[str], eos: Collection[int]) -> None:
        self.sequences = [tuple(tokenizer.encode(c, add_special_tokens=False)) for c in choices]
        self.eos = sorted(eos)

    def next_tokens(self, prefix: Sequence[int]) -> list[int]:
        """The ids that may follow ``prefix`` (end-of-turn ids once a choice is complete)."""
        n = len(prefix)
        head = tuple(prefix)
        allowed = {s[n] for s in self.sequences if len(s) > n and s[:n] == head}
        return sorted(allowed) or list(self.eos)

    def complete(self, prefix: Sequence[int]) -> bool:
        """Whether ``prefix`` is a choice that no longer choice extends."""
        head = tuple(prefix)
        longer = any(len(s) > len(head) and s[: len(head)] == head for s in self.sequences)
        return head in self.sequences and not longer


class StreamDetokenizer:
    """Reports the text each new token adds, decoding only a short window of recent ids.

    The usual incremental detokenization (as in vLLM / TGI): text is released once it no longer
    ends in an incomplete character, so the per-token cost stays flat as the output grows.

    Args:
        tokenizer: Decodes ids (special tokens skipped).
        on_text: Receives each released piece of text, in order.
    """

    def __init__(self, tokenizer: Any, on_text: TextCallback) -> None:
        self._tokenizer = tokenizer
        self._on_text = on_text
        self._prefix = 0
        self._read = 0

    def push(self, ids: Sequence[int]) -> None:
        """Release the text added by the newest id of ``ids`` (all ids generated so far)."""
        before = self._tokenizer.decode(ids[self._prefix : self._read], skip_special_tokens=True)
        after = self._tokenizer.decode(ids[self._prefix :], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._on_text(after[len(before) :])
            self._prefix, self._read = self._read, len(ids)


def make_generator(seed: int | None) -> torch.Generator:
    """The random generator of one request: reproducible when seeded, fresh entropy otherwise.

    >>> make_generator(7).initial_seed()
    7
    """
    import torch

    generator = torch.Generator()
    if seed is None:
        generator.seed()  # a non-deterministic seed from the OS
    else:
        generator.manual_seed(seed)
    return generator


@dataclass(frozen=True, slots=True)
class Decoded:
    """What the decode loop produced."""

    token_ids: list[int]
    logprobs: list[float] | None
    """Log-probability of each token under the distribution it was drawn from, as vLLM reports
    it: after ``choices`` narrowed it (renormalized over the allowed continuations), before the
    ``min_tokens`` end-of-turn ban and before temperature; when the request asked for logprobs."""
    finish_reason: FinishReason
    first_token_at: float | None
    """``time.perf_counter()`` when the first token was chosen."""


def decode(
    logits: torch.Tensor,
    step: Step,
    request: GenerationRequest,
    tokenizer: Any,
    eos: Collection[int],
    *,
    cancel: threading.Event | None = None,
    on_text: TextCallback | None = None,
) -> Decoded:
    """Generate up to ``request.max_tokens`` tokens, starting from the prompt's last logits.

    Args:
        logits: The logits for the first generated token (1-D, vocabulary sized).
        step: Feeds a chosen token to the model and returns the next logits; not called for the
            last token (nor after a stop), so the caller's cache then lacks only that token.
        request: Sampling settings: ``max_tokens``, ``min_tokens``, ``temperature``, ``seed``,
            ``stop``, ``choices``, ``logprobs``.
        tokenizer: Encodes choices and decodes stop strings and streamed text.
        eos: End-of-turn ids (kept in the output when generated).
        cancel: Set from another thread to stop before the next token (``abort``).
        on_text: Receives each streamed text delta.

    Returns:
        The ids, their logprobs when asked for, why decoding ended and when the first token came.
    """
    import torch

    eos_ids = sorted(eos)
    eos_set = set(eos_ids)
    trie = ChoiceTrie(tokenizer, request.choices, eos_ids) if request.choices else None
    stream = StreamDetokenizer(tokenizer, on_text) if on_text is not None else None
    generator = make_generator(request.seed) if request.temperature > 0 else None
    want_logprobs = request.logprobs is not None
    out: list[int] = []
    logprobs: list[float] = []
    finish: FinishReason = "length"
    first_token_at: float | None = None
    for i in range(request.max_tokens):
        if cancel is not None and cancel.is_set():
            finish = "abort"
            break
        logits = logits.float()
        if trie is not None:
            mask = torch.full_like(logits, float("-inf"))
            mask[trie.next_tokens(out)] = 0
            logits = logits + mask
        masked = logits
        if i < request.min_tokens and eos_ids:
            masked = masked.clone()
            masked[eos_ids] = float("-inf")
        if generator is not None:
            probs = torch.softmax(masked / request.temperature, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=generator))
        else:
            token = int(torch.argmax(masked))
        if first_token_at is None:
            first_token_at = time.perf_counter()
        out.append(token)
        if want_logprobs:
            # The choice constraint is part of the distribution (as in vLLM); the min_tokens ban
            # only delays the end of turn, so it does not change the reported odds.
            logprobs.append(float(torch.log_softmax(logits, dim=-1)[token]))
        if token in eos_set and i >= request.min_tokens:
            finish = "stop"
            break
        if stream is not None:
            stream.push(out)
        if trie is not None and trie.complete(out):
            finish = "stop"
            break
        if request.stop and _hits_stop(tokenizer, out, request.stop):
            finish = "stop"
            break
        if i + 1 == request.max_tokens:
            break
        logits = step(token)
    return Decoded(out, logprobs if want_logprobs else None, finish, first_token_at)


def _hits_stop(tokenizer: Any, ids: Sequence[int], stop: Sequence[str]) -> bool:
    text = tokenizer.decode(ids, skip_special_tokens=True)
    return any(s in text for s in stop)


def final_text(tokenizer: Any, ids: Sequence[int], stop: Sequence[str]) -> str:
    """The generated text, cut before the first stop string it contains.

    Args:
        tokenizer: Decodes ``ids`` (special tokens skipped).
        ids: The generated ids.
        stop: Stop strings (the output ends before the earliest one found).
    """
    text: str = tokenizer.decode(ids, skip_special_tokens=True)
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text
