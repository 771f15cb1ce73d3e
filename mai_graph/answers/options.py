"""Multiple-choice options: a list of texts or a mapping of letter to text, validated once.

Datasets write options two ways: a list (``["cat", "dog"]``, lettered A, B, ... in order) or a
mapping (MMBench: ``{"A": "cat", "B": "dog"}``). :func:`normalize_options` turns either into
one ``dict`` of upper-case letter to option text, keeping a mapping's own letters and order.
"""

from __future__ import annotations

import functools
import math
import unicodedata
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any, TypeAlias

from mai_graph.errors import ConfigError
from mai_graph.text import check_text

__all__ = ["MAX_OPTIONS", "Options", "normalize_options", "option_text"]

Options: TypeAlias = Mapping[str, str] | Sequence[str]
"""Option texts in letter order (A, B, ...), or a mapping of option letter to text."""

MAX_OPTIONS = 26
MAX_OPTION_CHARS = 2_000
"""Longest option text accepted, in characters (each option is in every prompt of a run)."""
"""At most one option per letter A..Z."""

# Cyrillic and Greek letters drawn like Latin ones (after casefold), read as those.
_LOOKALIKE = str.maketrans("аеорсухіјѕԁԛԝһӏοινρ", "aeopcyxijsdqwhloivp")


def _reader_form(text: str) -> str:
    """``text`` as a reader sees it, to compare options.

    NFKC (as answers are read), casefolded, invisible format characters dropped, Cyrillic and
    Greek look-alikes of Latin letters read as Latin.

    >>> _reader_form("Ｒｅｄ"), _reader_form("r\u200bed"), _reader_form("rеd")
    ('red', 'red', 'red')
    """
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    visible = "".join(c for c in folded if unicodedata.category(c) != "Cf")
    return visible.translate(_LOOKALIKE)


def _plain_key(text: str) -> str:
    folded = text.casefold()
    return " ".join((folded.strip(_EDGE) or folded).split())


_FIX = 'pass a list of option texts (["cat", "dog"]) or a mapping {"A": "cat", "B": "dog"}'


def option_text(value: object, where: str) -> str:
    """One option's text: strings stripped, numbers written the short way.

    Integral floats drop the ``.0`` (a table's ``3.0`` reads ``3``); other numbers use
    Python's shortest round-trip form.

    Args:
        value: The option value as given.
        where: How to name the option in an error (``"option B"``).

    Returns:
        The option text.

    Raises:
        ConfigError: For ``None``, NaN or infinite numbers, empty texts and other types.

    >>> option_text(" a cat ", "option A"), option_text(3.0, "option B"), option_text(2.5, "")
    ('a cat', '3', '2.5')
    """
    if isinstance(value, str):
        text = value.strip()
    elif isinstance(value, bool):
        text = str(value)
    elif isinstance(value, Real):
        number = float(value)
        if not math.isfinite(number):
            raise ConfigError(
                f"{where} is {value!r}, not a usable option (a missing cell?)",
                parameter="options",
                value=value,
                fix="drop missing options before passing them",
            )
        text = str(int(number)) if number.is_integer() and abs(number) < 1e15 else repr(value)
    elif value is None:
        raise ConfigError(
            f"{where} is None (a missing option?)",
            parameter="options",
            value=value,
            fix="drop missing options before passing them",
        )
    else:
        raise ConfigError(
            f"{where} must be a string or a number, got {type(value).__name__}",
            parameter="options",
            value=value,
            fix=_FIX,
        )
    if not text:
        raise ConfigError(
            f"{where} is empty", parameter="options", value=value, fix="give every option a text"
        )
    return text


_EDGE = " \t\n.,;:!?\"'()[]"
"""Characters around an option's text that an answer's matching ignores (``Red.`` is ``red``)."""


def normalize_options(options: object) -> dict[str, str] | None:
    """Validate options once and return them as ``{letter: text}``, or None for no options.

    A sequence is lettered A, B, ... in order. A mapping keeps its own letters (single letters
    A-Z, any case, stored upper-case) and its order, so ``{"B": ..., "C": ...}`` stays B and C.
    Option values may be strings or numbers (see :func:`option_text`).

    Args:
        options: None, a sequence of option texts, or a mapping of letter to text.

    Returns:
        An ordered ``dict`` of upper-case letter to stripped option text, or None.

    Raises:
        ConfigError: For a bare string, a set, bad or duplicate letters, ``None`` / NaN /
            empty option texts, two texts an answer could not tell apart (the same up to
            case, spaces and the punctuation around them), a text that is another option's
            letter, and fewer than 2 or more than 26 options.

    >>> normalize_options(["cat", "dog"])
    {'A': 'cat', 'B': 'dog'}
    >>> normalize_options({"b": "cat", "C": 7})
    {'B': 'cat', 'C': '7'}
    >>> normalize_options(None) is None
    True
    """
    if options is None:
        return None
    if type(options) is dict:  # the common case, seen again by every node: validated once
        try:  # the value's type is part of the key: True == 1, but "True" != "1"
            return dict(_normalized_items(tuple((k, type(v), v) for k, v in options.items())))
        except TypeError:  # an unhashable option value: validated below, where it fails
            pass
    return _normalize(options)


@functools.lru_cache(maxsize=1024)
def _normalized_items(items: tuple[tuple[Any, type, Any], ...]) -> tuple[tuple[str, str], ...]:
    out = _normalize({k: v for k, _, v in items})
    return tuple(out.items()) if out else ()


def _normalize(options: object) -> dict[str, str] | None:
    if isinstance(options, Mapping):
        out: dict[str, str] = {}
        for key, value in options.items():
            if not (isinstance(key, str) and len(key.strip()) == 1 and key.strip().isascii()):
                raise ConfigError(
                    f"option keys must be single letters A-Z, got {key!r}",
                    parameter="options",
                    value=options,
                    fix=_FIX,
                )
            letter = key.strip().upper()
            if not "A" <= letter <= "Z":
                raise ConfigError(
                    f"option keys must be single letters A-Z, got {key!r}",
                    parameter="options",
                    value=options,
                    fix=_FIX,
                )
            if letter in out:
                raise ConfigError(
                    f"option letter {letter} is given twice",
                    parameter="options",
                    value=options,
                    fix="give each option its own letter",
                )
            out[letter] = option_text(value, f"option {letter}")
    elif isinstance(options, Sequence) and not isinstance(options, (str, bytes, bytearray)):
        if len(options) > MAX_OPTIONS:
            raise ConfigError(
                f"need 2 to {MAX_OPTIONS} options, got {len(options)}",
                parameter="options",
                value=options,
                fix="pass at most 26 options (one per letter A-Z)",
            )
        out = {
            chr(ord("A") + i): option_text(value, f"option {chr(ord('A') + i)}")
            for i, value in enumerate(options)
        }
    else:
        shown = f" {options!r:.80}" if isinstance(options, str | bytes | int | float) else ""
        raise ConfigError(
            f"options must be a list of texts or a mapping of letter to text, "
            f"got {type(options).__name__}{shown}",
            parameter="options",
            value=options,
            fix=_FIX,
        )
    if not 2 <= len(out) <= MAX_OPTIONS:
        raise ConfigError(
            f"need 2 to {MAX_OPTIONS} options, got {len(out)}",
            parameter="options",
            value=options,
            fix="pass at least two options, or None for an open question",
        )
    seen: dict[str, str] = {}
    for letter, text in out.items():
        check_text(text, f"option {letter}", MAX_OPTION_CHARS)
        named = unicodedata.normalize("NFKC", text).strip(_EDGE)
        if len(named) == 1 and named.isupper() and named in out and named != letter:
            raise ConfigError(
                f"option {letter}'s text is {text!r}, the letter of option {named}: an answer "
                f"{named!r} could mean either",
                parameter="options",
                value=options,
                fix='write such options as words ("the letter B"), or letter the options so '
                "that no text is another option's letter",
            )
        # texts that are all punctuation ("?", ":)") are compared whole
        key = _plain_key(_reader_form(text))
        if key in seen:
            first = out[seen[key]]
            same = f"the same text {text!r:.60}: an answer"
            if _plain_key(first) != _plain_key(text):
                same = (f"the same text to a reader ({first!r:.40} and {text!r:.40} differ only "
                        "in look-alike or invisible characters): an answer")  # fmt: skip
            raise ConfigError(
                f"options {seen[key]} and {letter} are {same} could not tell them apart",
                parameter="options",
                value=options,
                fix="give each option a different text",
            )
        seen[key] = letter
    return out
