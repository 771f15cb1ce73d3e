"""JSON and numbers from outside, with limits: one parser for every door.

Every door that reads JSON or a number written by someone else parses it here: ``--options``,
``--set`` and ``--engine`` values, ``--context`` and lineup files, the ``MAI_GRAPH_*_ENGINE``
variables, datasets and ``records.jsonl`` lines, a model's ``config.json`` and safetensors
header, a latency model, a trained pair's manifest. What Python's ``json`` accepts and no
door can use is refused with a :class:`~mai_graph.errors.ConfigError` naming the parameter
and the fix, before anything acts on the value:

- nesting deeper than :data:`MAX_JSON_DEPTH` (Python's own parser fails with a
  ``RecursionError`` some hundreds of levels down);
- an integer of more than :data:`MAX_INT_DIGITS` digits (Python refuses to read one of over
  4,300, with a ``ValueError`` that is no one's message; long before that, no count, size or
  seed a door takes has so many);
- ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON; Python reads them unless told not to),
  and numbers too large for a float (``1e400`` reads as infinity).

Range checks per field (``kv_cache_gib`` finite and positive, heads at least 1) live with the
fields, through :func:`~mai_graph.errors.check_number` and
:func:`~mai_graph.errors.check_int`; :data:`MAX_BYTES` bounds every memory size.
"""

from __future__ import annotations

import json
import math
from typing import Any

from mai_graph.errors import ConfigError, check_number

__all__ = [
    "MAX_BYTES",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "check_limits",
    "json_or_text",
    "parse_gib",
    "parse_json",
    "parse_number",
]

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted. A lineup is 4 levels deep, a dataset row or
a record line under 10."""

MAX_INT_DIGITS = 100
"""Most digits of an integer accepted (a 64-bit seed has 20)."""

MAX_BYTES = 1 << 50
"""Largest memory size accepted anywhere (1 PiB): ``--gpu-memory``, ``kv_cache_gib``."""


class _Refused(ValueError):
    """A value the parser's hooks refuse (turned into a ConfigError by :func:`parse_json`)."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.fix = fix


_DIGITS_FIX = f"write numbers of at most {MAX_INT_DIGITS} digits"
_CONSTANT_FIX = "write finite numbers (NaN and Infinity are not JSON)"
_FLOAT_FIX = "write numbers a float holds (up to about 1.8e308)"


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Refused(
            f"an integer of {digits:,} digits, over the limit of {MAX_INT_DIGITS}", _DIGITS_FIX
        )
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"a number too large for a float ({text[:40]})", _FLOAT_FIX)
    return value


def _constant(name: str) -> float:
    raise _Refused(f"{name}, which is not a number JSON has", _CONSTANT_FIX)


def _allowed_constant(name: str) -> float:
    return float(name)


_INT_LIMIT = 10**MAX_INT_DIGITS


def check_limits(value: Any, *, parameter: str, what: str, constants: bool = False) -> Any:
    """``value`` (parsed JSON or TOML) if it keeps this module's limits.

    The walk uses no recursion. ``constants`` lets NaN and the infinities through (see
    :func:`parse_json`).

    >>> check_limits({"a": [1, {"b": 2.5}]}, parameter="--lineup", what="the lineup")
    {'a': [1, {'b': 2.5}]}

    Raises:
        ConfigError: Nesting over :data:`MAX_JSON_DEPTH`, an integer over
            :data:`MAX_INT_DIGITS` digits, or (without ``constants``) a non-finite float.
    """
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                raise _too_deep(what, parameter)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int) and not -_INT_LIMIT < item < _INT_LIMIT:
            raise _limit_error(what, parameter, _Refused(
                f"an integer of over {MAX_INT_DIGITS} digits", _DIGITS_FIX))  # fmt: skip
        elif isinstance(item, float) and not constants and not math.isfinite(item):
            raise _limit_error(what, parameter, _Refused(
                f"{item}, which is not a number JSON has", _CONSTANT_FIX))  # fmt: skip
    return value


def _too_deep(what: str, parameter: str) -> ConfigError:
    return ConfigError(
        f"{what} nests too deep to read (over {MAX_JSON_DEPTH} levels of arrays and objects)",
        parameter=parameter,
        fix="write the flat JSON it takes (a few levels deep)",
    )


def _limit_error(what: str, parameter: str, exc: _Refused) -> ConfigError:
    return ConfigError(f"{what} holds {exc}", parameter=parameter, fix=exc.fix)


def parse_json(
    text: str | bytes,
    *,
    parameter: str,
    what: str,
    fix: str | None = None,
    constants: bool = False,
) -> Any:
    """Parse JSON from outside, within the limits of this module.

    Args:
        text: The JSON text (bytes are read as UTF-8).
        parameter: The flag, variable or field it came from (errors name it).
        what: What it is, for the message (``the context file x.json``, ``--options``).
        fix: The fix for a text that is not JSON at all (default: a generic one).
        constants: Read ``NaN`` / ``Infinity`` as floats (for files written by other tools,
            such as a checkpoint's ``config.json``, whose fields are range-checked where used).

    Raises:
        ConfigError: Not JSON, or over a limit; the message says which and names ``parameter``.

    >>> parse_json('{"a": [1, 2.5]}', parameter="--options", what="--options")
    {'a': [1, 2.5]}
    >>> parse_json("[NaN]", parameter="--options", what="--options")
    Traceback (most recent call last):
        ...
    mai_graph.errors.ConfigError: --options holds NaN, which is not a number JSON has. Fix: write finite numbers (NaN and Infinity are not JSON)
    """  # noqa: E501
    try:
        value = json.loads(
            text,
            parse_int=_int,
            parse_float=_float,
            parse_constant=_allowed_constant if constants else _constant,
        )
    except _Refused as exc:
        raise _limit_error(what, parameter, exc) from None
    except RecursionError:  # deeper than Python's parser goes, far over the limit
        raise _too_deep(what, parameter) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{what} is not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})",
            parameter=parameter,
            fix=fix or "write valid JSON",
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:  # bytes that are not UTF-8 (or -16/-32)
        raise ConfigError(
            f"{what} is not valid JSON text ({exc})", parameter=parameter,
            fix=fix or "write valid JSON in UTF-8",
        ) from None  # fmt: skip
    return check_limits(value, parameter=parameter, what=what, constants=constants)


def json_or_text(raw: str, *, parameter: str) -> Any:
    """A ``KEY=VALUE`` value (``--set``, ``--engine``): JSON where it parses, else the text.

    What parses as JSON but is over a limit is refused, not read as text.

    >>> json_or_text("0.3", parameter="--set"), json_or_text("bfloat16", parameter="--engine")
    (0.3, 'bfloat16')

    Raises:
        ConfigError: JSON over a limit, or ``NaN`` / ``Infinity``.
    """
    try:
        json.loads(raw, parse_int=str, parse_float=str, parse_constant=str)
    except json.JSONDecodeError:
        return raw
    except RecursionError:
        pass  # JSON nesting too deep: parse_json says so
    return parse_json(raw, parameter=parameter, what=f"{parameter} value {raw[:40]!r}")


def parse_number(raw: str, *, parameter: str, integer: bool = False) -> int | float:
    """A number given as text (an environment variable): finite, of a sensible length.

    >>> parse_number("120", parameter="MAI_GRAPH_REQUEST_TIMEOUT")
    120.0
    >>> parse_number("1e999", parameter="MAI_GRAPH_REQUEST_TIMEOUT")
    Traceback (most recent call last):
        ...
    mai_graph.errors.ConfigError: MAI_GRAPH_REQUEST_TIMEOUT must be a number, got '1e999'. Fix: set MAI_GRAPH_REQUEST_TIMEOUT to e.g. 120 (finite, of at most 100 digits)
    """  # noqa: E501
    text = raw.strip()
    example = "2" if integer else "120"
    kind = "a whole number" if integer else "a number"
    try:
        if len(text) > MAX_INT_DIGITS + 20:
            raise ValueError(text)
        value: int | float = int(text) if integer else float(text)
    except ValueError:
        value = math.nan
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(
            f"{parameter} must be {kind}, got {raw[:40]!r}",
            parameter=parameter,
            value=raw[:40],
            fix=f"set {parameter} to e.g. {example} (finite, of at most {MAX_INT_DIGITS} digits)",
        )
    return value


def parse_gib(raw: str | None, *, parameter: str, default: float) -> float:
    """A size in GiB given as text (``VLLM_CPU_KVCACHE_SPACE``); unset, empty or 0: ``default``.

    >>> parse_gib("4", parameter="VLLM_CPU_KVCACHE_SPACE", default=1.0)
    4.0
    >>> parse_gib("", parameter="VLLM_CPU_KVCACHE_SPACE", default=1.0)
    1.0

    Raises:
        ConfigError: Not a number, or not in (0, :data:`MAX_BYTES`].
    """
    text = (raw or "").strip()
    if text in ("", "0"):
        return default
    value = parse_number(text, parameter=parameter)
    return float(check_number(value, parameter, unit="GiB", above=0, maximum=MAX_BYTES >> 30,
                              fix=f"set {parameter} to a size in GiB, e.g. 4"))  # fmt: skip
