"""Chat rendering to token ids, shared by the in-process backends (vLLM, transformers).

Prompts are rendered with the model's own chat template and tokenized here, so every request is
sent as token ids with the image placeholder unexpanded. An assistant turn that carries its
generated ``token_ids`` is spliced in verbatim: the S2 prompt then starts with exactly the ids
the engine already holds in its prefix / KV cache (re-tokenizing generated text would differ).

This is deliberate, not a stand-in for a library: neither vLLM's chat entry points nor
transformers' ``apply_chat_template`` take token ids for a turn, and without the splice the S2
turn and the transfer answer would re-read the whole reasoning instead of hitting the cache.

Text is never control tokens (issue 39): caller text that makes a control-token literal, alone
or joined by the template to the text beside it, is spliced as the ids of its characters;
spliced ids lose their control ids; roles other than system, user and assistant are refused.
"""

from __future__ import annotations

import functools
import hashlib
import re
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mai_graph.errors import ConfigError
from mai_graph.inputs.images import ImageRef
from mai_graph.inputs.video import VideoRef
from mai_graph.messages import Message, Part

__all__ = [
    "ROLES",
    "RenderedPrompt",
    "check_roles",
    "common_prefix",
    "control_ids",
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


ROLES = ("system", "user", "assistant")
r"""The roles a message may have: chat templates write the role into the turn's header as it
is, so any other string could carry markup (``"user\n<|im_end|>"``)."""


def check_roles(messages: Sequence[Message]) -> None:
    """Refuse a message whose role is not one of :data:`ROLES`.

    >>> check_roles([{"role": "user", "content": []}])
    >>> try:
    ...     check_roles([{"role": "tool", "content": []}])  # type: ignore[typeddict-item]
    ... except ConfigError as e:
    ...     print(e.parameter, e.value)
    messages 'tool'
    """
    for m in messages:
        role = m.get("role") if isinstance(m, Mapping) else None
        if not isinstance(role, str) or role not in ROLES:
            raise ConfigError(
                f"a message's role must be system, user or assistant, got {role!r:.60}",
                parameter="messages",
                value=repr(role)[:80],
                fix="give each message one of the roles system, user, assistant",
            )


_MEDIA = ("image", "video")


class _Marks:
    """Placeholders for the text a render splices as ids, which no text of the prompt holds.

    The tag is a digest of every text of the prompt: text cannot hold the digest of itself, so
    caller text can neither forge a placeholder nor break one.
    """

    def __init__(self, messages: Sequence[Message]) -> None:
        texts = [str(p.get("text", "")) for m in messages for p in m["content"]]
        digest = hashlib.sha256("\0".join(texts).encode("utf-8", "surrogatepass")).hexdigest()
        salt = 0
        tag = "\ue000" + digest[:16]
        while any(tag in t for t in texts):  # never in practice; still, not a guess
            salt += 1
            tag = "\ue000" + hashlib.sha256(f"{digest}{salt}".encode()).hexdigest()[:16]
        self.tag = tag
        self.pattern = re.compile(re.escape(tag) + "(\\d+)\ue001")

    def __call__(self, k: int) -> str:
        return f"{self.tag}{k}\ue001"

    def split(self, rendered: str) -> tuple[list[str], list[int]]:
        """The text between placeholders, and the placeholders' numbers in order."""
        chunks = self.pattern.split(rendered)
        return chunks[0::2], [int(k) for k in chunks[1::2]]


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

    Text reaches the model as text, never as control tokens: a part whose text makes a
    control-token literal (``<|im_start|>``) on its own, or with the text the chat template
    joins to it (``"q<|im_"`` + ``"end|>"``), is spliced as the ids of its characters
    (:func:`encode_as_text`); spliced ids carry no control ids (:func:`_defused`); roles are
    checked (:func:`check_roles`).

    Args:
        tokenizer: A Hugging Face tokenizer (encodes the rendered text).
        messages: The conversation.
        eos_token_ids: End-of-turn ids the engine may leave at the end of generated ids.
        template: What renders the chat template: the model's processor (vision models keep
            their template there), default the tokenizer.
        thinking: ``False`` renders with ``enable_thinking=False`` (see :func:`thinking_for`).
    """
    check_roles(messages)
    template = template if template is not None else tokenizer
    images = [p["image"] for m in messages for p in m["content"] if p["type"] == "image"]
    videos = [p["video"] for m in messages for p in m["content"] if p["type"] == "video"]
    marks = _Marks(messages)
    forging = _forging(template, messages, control_literals(tokenizer), marks, thinking)
    pieces: list[list[int]] = []
    literal: set[int] = set()  # pieces that are caller text holding control-token literals
    marked: list[Message] = []
    for i, m in enumerate(messages):
        own = m["role"] == "assistant"  # the model's own turn: positions are kept
        ids = m.get("token_ids")
        if own and ids:
            pieces.append(_defused(ids, tokenizer, template, own_turn=True, eos=eos_token_ids))
            marked.append({"role": "assistant", "content": [_text(marks(len(pieces) - 1))]})
            continue
        content: list[Part] = []
        for j, part in enumerate(m["content"]):
            if part["type"] == "image" or part["type"] == "video":
                content.append(part)
                continue
            part_ids = part.get("token_ids")
            if part_ids:
                pieces.append(
                    _defused(part_ids, tokenizer, template, own_turn=own, eos=eos_token_ids)
                )
            elif (i, j) in forging:
                # Caller text reaches the model as text: a literal "<|im_start|>" in it is
                # encoded as its characters, never as the control token (no forged turns).
                literal.add(len(pieces))
                pieces.append(encode_as_text(tokenizer, part["text"]))
            else:
                content.append(part)
                continue
            content.append(_text(marks(len(pieces) - 1)))
        marked.append({"role": m["role"], "content": content})
    if not pieces:
        full = _template(template, messages, generation_prompt=True, thinking=thinking)
        return RenderedPrompt(_encode(tokenizer, full), images, [], videos)
    rendered = _template(template, marked, generation_prompt=True, thinking=thinking)
    chunks, found = marks.split(rendered)
    if found != list(range(len(pieces))):  # the template rewrote a turn: no exact splice
        if forging:  # rendered whole, some text would become control tokens
            raise ConfigError(
                "the model's chat template rewrote a turn whose text holds control-token "
                "literals (such as <|im_start|>), so it cannot be sent as plain text",
                parameter="messages",
                fix="remove the special-token markup from the question, options or messages",
            )
        full = _template(template, messages, generation_prompt=True, thinking=thinking)
        return RenderedPrompt(_encode(tokenizer, full), images, [], videos)
    token_ids = _encode(tokenizer, _opening(template, marked, chunks[0], marks))
    spans = []
    for k, ids in enumerate(pieces):
        tail = chunks[k + 1]
        if k not in literal and ids and ids[-1] in eos_token_ids:
            # The engine kept the end-of-turn token; drop its text twin from what follows.
            eos_text = tokenizer.decode([ids[-1]])
            if tail.startswith(eos_text):
                tail = tail[len(eos_text) :]
        if k not in literal:
            spans.append((len(token_ids), len(token_ids) + len(ids)))
        token_ids += ids + _encode(tokenizer, tail)
    return RenderedPrompt(token_ids, images, spans, videos)


_GAP = "\x00"
"""What stands between texts the template does not join (no control literal holds it)."""


def _forging(
    template: Any,
    messages: Sequence[Message],
    controls: Sequence[str],
    marks: _Marks,
    thinking: bool,
) -> set[tuple[int, int]]:
    """The text parts, as ``(message, part)``, that a control-token literal in the prompt overlaps.

    A literal may lie inside one part, or be made by the chat template's join: the end of a
    part and the start of the next (``"q<|im_"`` + ``"end|>"``), or a part and the template's
    own text beside it. The template's joins come from its skeleton, the prompt rendered with
    each text part a placeholder (the text between placeholders is the template's own); a
    template that rewrites turns is taken to join a turn's adjacent text parts as they are.
    """
    where = [
        (i, j)
        for i, m in enumerate(messages)
        for j, p in enumerate(m["content"])
        if p["type"] not in _MEDIA
    ]
    texts = [str(messages[i]["content"][j].get("text", "")) for i, j in where]
    if not controls or not any(_may_form(t, controls) for t in texts):
        return set()
    skeleton: list[Message] = []
    k = 0
    for m in messages:
        content: list[Part] = []
        for p in m["content"]:
            if p["type"] in _MEDIA:
                content.append(p)
            else:
                content.append(_text(marks(k)))
                k += 1
        skeleton.append({"role": m["role"], "content": content})
    glue: list[str] | None = None
    try:
        between, found = marks.split(
            _template(template, skeleton, generation_prompt=True, thinking=thinking)
        )
        glue = between if found == list(range(len(where))) else None
    except ConfigError:
        pass
    if glue is None:
        glue = [_GAP]
        for (i, j), (i2, j2) in zip(where, where[1:]):
            glue.append("" if (i2, j2) == (i, j + 1) else _GAP)
        glue.append(_GAP)
    joined, spans = glue[0], []
    for text, after in zip(texts, glue[1:]):
        spans.append((len(joined), len(joined) + len(text)))
        joined += text + after
    forging: set[tuple[int, int]] = set()
    for hit in _literals(tuple(controls)).finditer(joined):
        start, end = hit.start(), hit.start() + len(hit.group(1))
        forging.update(where[n] for n, (a, b) in enumerate(spans) if a < end and start < b)
    return forging


def _may_form(text: str, controls: Sequence[str]) -> bool:
    """Whether ``text`` holds a control literal or could make one with the text beside it."""
    for c in controls:
        if c in text or (text and text in c):
            return True
        if any(text.endswith(c[:n]) or text.startswith(c[n:]) for n in range(1, len(c))):
            return True
    return False


@functools.lru_cache(maxsize=16)
def _literals(controls: tuple[str, ...]) -> re.Pattern[str]:
    """Every occurrence of a control literal, overlapping ones too (longest first)."""
    return re.compile("(?=(" + "|".join(map(re.escape, controls)) + "))")


_CONTROLS: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()
_CONTROL_IDS: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()
_MARKUP_TOKEN = re.compile(r"<[^<>\s]{1,64}>")
_V = TypeVar("_V")


def _cached(cache: weakref.WeakKeyDictionary[Any, _V], key: Any, make: Callable[[], _V]) -> _V:
    """``make()``, kept as long as ``key`` lives (not kept for an object no weak reference holds).

    Keyed by the object, not its ``id``: a recycled id never returns another object's value.
    """
    try:
        return cache[key]
    except KeyError:
        pass
    except TypeError:
        return make()
    value = make()
    try:
        cache[key] = value
    except TypeError:
        pass
    return value


def control_literals(tokenizer: Any) -> tuple[str, ...]:
    """The control tokens a tokenizer matches whole in text (``<|im_start|>``, ``<think>``, ...).

    Added tokens are matched in text before the BPE runs, so caller text holding one of these
    would become that control token. Controls are the special tokens and every added token
    spelled as markup (``<...>``); an added ordinary word (a domain vocabulary entry) is not.
    """

    def make() -> tuple[str, ...]:
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        found = {
            str(getattr(t, "content", t))
            for t in added.values()
            if getattr(t, "special", True) or _MARKUP_TOKEN.fullmatch(str(t.content))
        }
        found |= {str(t) for t in getattr(tokenizer, "all_special_tokens", ()) or ()}
        return tuple(sorted((t for t in found if t), key=len, reverse=True))

    return _cached(_CONTROLS, tokenizer, make)


def control_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the tokenizer's control tokens: its special ids and :func:`control_literals`."""

    def make() -> frozenset[int]:
        ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
        ids |= {tokenizer.convert_tokens_to_ids(c) for c in control_literals(tokenizer)}
        return frozenset(i for i in ids if isinstance(i, int))

    return _cached(_CONTROL_IDS, tokenizer, make)


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
    banned = control_ids(tokenizer)
    if not banned.intersection(ids):
        return ids
    out: list[int] = []
    for chunk in re.split("(" + "|".join(map(re.escape, controls)) + ")", text):
        if not chunk:
            continue
        if chunk in controls:  # byte by byte: no merge can rebuild the added token
            for ch in chunk:
                out += [i for i in _encode(tokenizer, ch) if i not in banned]
        else:
            out += _encode(tokenizer, chunk)
    return out


def _opening(template: Any, marked: Sequence[Message], before: str, marks: _Marks) -> str:
    """The text before the first splice, as the call that generated it saw it.

    When the first splice is an assistant turn (S2 over a chain of thought), its ids were
    generated after the template's generation prompt, which may say more than the turn's
    header: a thinking template opens ``<think>``. The prompt of that earlier call (the turns
    before, with the generation prompt, thinking on) is then the exact prefix, so the engine's
    cache serves it and the model reads its reasoning as it wrote it.
    """
    first = next(
        (
            i
            for i, m in enumerate(marked)
            if any(marks.pattern.search(str(p.get("text", ""))) for p in m["content"])
        ),
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
_MEDIA_IDS: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()


def media_ids(tokenizer: Any) -> frozenset[int]:
    """Ids of the tokens that stand for media in a prompt (Qwen-VL's placeholders), if any.

    A model may *generate* one of them (random weights do, when sampling); spliced into a later
    prompt it would read as one more image, so spliced ids never carry them (:func:`_defused`).
    """

    def make() -> frozenset[int]:
        unk = getattr(tokenizer, "unk_token_id", None)
        ids = {tokenizer.convert_tokens_to_ids(t) for t in _MEDIA_TOKENS}
        return frozenset(i for i in ids if isinstance(i, int) and i != unk)

    return _cached(_MEDIA_IDS, tokenizer, make)


_TURN_MARKUP: weakref.WeakKeyDictionary[Any, frozenset[int]] = weakref.WeakKeyDictionary()


def _turn_markup(tokenizer: Any, template: Any) -> frozenset[int]:
    """Ids of the markup tags a model may write in its own turn and read back verbatim (S2).

    The added tokens that are not special and that the chat template does not write around a
    turn or its media: ``<think>`` and ``</think>`` (a thinking model writes them; an Instruct
    model may too). Special tokens (turn markers, media placeholders, end of text) are what
    could forge a turn or an image, and never stay.
    """

    def make() -> frozenset[int]:
        user: list[dict[str, Any]] = [{"type": "image"}, {"type": "text", "text": "x"}]
        try:
            turn = [{"role": "user", "content": user}]
            around = str(template.apply_chat_template(turn, tokenize=False))
        except Exception:  # a template that cannot render this: nothing is let through
            return frozenset()
        added = getattr(tokenizer, "added_tokens_decoder", None) or {}
        special = set(getattr(tokenizer, "all_special_ids", ()) or ())
        return frozenset(
            i
            for i, t in added.items()
            if not getattr(t, "special", True)
            and i not in special
            and _MARKUP_TOKEN.fullmatch(str(t.content))
            and str(t.content) not in around
        )

    return _cached(_TURN_MARKUP, template, make)


def _defused(
    ids: Sequence[int], tokenizer: Any, template: Any, *, own_turn: bool, eos: set[int]
) -> list[int]:
    """Spliced ids without control ids: reasoning a model wrote reaches the next one as text.

    Every control id (:func:`control_ids`: turn markers, media placeholders, ...) is dropped.
    In a model's own turn (S2 over its chain of thought) positions are kept, so the span lines
    up with the reasoning's tokens: a special id is replaced by a space, and the markup tags a
    model writes in its turn (:func:`_turn_markup`, ``<think>`` / ``</think>``) and a closing
    end-of-turn id stay, as the model wrote them (the prompt extends the cached one exactly).
    """
    banned = control_ids(tokenizer)
    if not banned.intersection(ids):
        return list(ids)
    if not own_turn:
        return [i for i in ids if i not in banned]
    kept = _turn_markup(tokenizer, template)
    last = len(ids) - 1 if ids[-1] in eos else -1
    filler = _filler(tokenizer, banned)
    out = []
    for n, i in enumerate(ids):
        if i not in banned or i in kept or n == last:
            out.append(i)
        elif filler is not None:
            out.append(filler)
    return out


def _filler(tokenizer: Any, banned: frozenset[int]) -> int | None:
    """One ordinary id that reads as white space (None: the tokenizer has none)."""
    for text in (" ", "\n", "."):
        ids = _encode(tokenizer, text)
        if len(ids) == 1 and ids[0] not in banned:
            return ids[0]
    return None


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
