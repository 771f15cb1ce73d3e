r"""Text a caller sends: valid Unicode and within its cap, or a typed error naming the field.

JSON may carry lone surrogates (``"\ud800"`` is valid JSON, not valid Unicode text); they
cannot be encoded for a tokenizer, a log or a response, so they are refused where the text
enters, with the field and the position, instead of failing deep inside as a
``UnicodeEncodeError``.
"""

from __future__ import annotations

import re

from mai_graph.errors import ConfigError

__all__ = ["check_text", "without_reprs"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


def without_reprs(text: str, instead: str = "the input") -> str:
    """``text`` with Python object reprs (``<_io.BytesIO object at 0x...>``) replaced.

    Messages of libraries name the objects they were given; a caller learns nothing from a
    memory address, and a remote one should not see it.

    >>> without_reprs("cannot identify image file <_io.BytesIO object at 0x7f3a2c>", "<data URL>")
    'cannot identify image file <data URL>'
    """
    return _REPR.sub(instead, text)


def check_text(value: str, parameter: str, limit: int) -> str:
    r"""``value`` if it is encodable text of at most ``limit`` characters.

    >>> check_text("red", "option A", 100)
    'red'
    >>> try:
    ...     check_text("a\ud800", "question", 100)
    ... except ConfigError as exc:
    ...     print(exc.parameter, "unpaired surrogate" in str(exc))
    question True

    Raises:
        ConfigError: Over ``limit`` characters, or holding an unpaired surrogate.
    """
    if len(value) > limit:
        raise ConfigError(
            f"{parameter} has {len(value):,} characters, over the limit of {limit:,}",
            parameter=parameter,
            value=len(value),
            fix=f"shorten the {parameter}",
        )
    bad = _SURROGATE.search(value)
    if bad:
        raise ConfigError(
            f"{parameter} holds an unpaired surrogate (U+{ord(bad.group()):04X}) at character "
            f"{bad.start()}: not valid Unicode text",
            parameter=parameter,
            value=value[max(0, bad.start() - 20) : bad.start()],
            fix="send valid UTF-8 text (a JSON \\u escape must be a whole character, pairs "
            "included)",
        )
    return value
