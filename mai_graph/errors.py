"""One error family for mai-graph: every error names the bad parameter, its value and the fix."""

from __future__ import annotations

import math
from typing import Any

__all__ = [
    "BackendError",
    "ConfigError",
    "ImageAccessError",
    "ImageError",
    "ImageMismatchError",
    "MAIError",
    "check_int",
    "check_number",
    "shown",
]

_MISSING = object()


class MAIError(Exception):
    """Base of all mai-graph errors.

    Attributes:
        parameter: The argument, setting or input field at fault (``None`` if not one field).
        value: The offending value, when there is one.
        fix: What to do about it, in one sentence.
        message: The message without its fix.
    """

    def __init__(
        self,
        message: str,
        *,
        parameter: str | None = None,
        value: Any = _MISSING,
        fix: str | None = None,
    ) -> None:
        self.parameter = parameter
        self.value = None if value is _MISSING else value
        self.fix = fix
        self.message = message
        text = message if fix is None else f"{message}. Fix: {fix}"
        super().__init__(text)


class ConfigError(MAIError, ValueError):
    """A setting, option or argument is invalid (raised before any model is called)."""


class ImageError(MAIError, ValueError):
    """An image is missing, unreadable, too large or of an unsupported kind."""


class ImageAccessError(ImageError):
    """The image policy refuses the source (a path outside the allowed roots, a URL).

    Every refused path gets the same message, whether or not a file exists there.
    """


class ImageMismatchError(ImageError):
    """An image reference does not match its file: forged, stale, or the file is gone."""


class BackendError(MAIError, RuntimeError):
    """A model backend failed to serve a request.

    Attributes:
        transient: True when retrying the same request may succeed (overload, timeout,
            connection reset); False for errors the request itself causes.
    """

    def __init__(self, message: str, *, transient: bool = False, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.transient = transient


def _number(n: int) -> str:
    """``4096``, ``1,000,000``: thousands separators from five digits on."""
    return f"{n:,}" if abs(n) >= 10_000 else str(n)


def shown(value: Any, width: int = 80) -> str:
    """``repr(value)`` for a message, at most ``width`` characters.

    An integer too long to show (Python refuses to print one of over 4,300 digits) is named by
    its size.

    >>> shown(10**100)
    'an integer of 101 digits'
    >>> shown("x" * 100, 10)
    "'xxxxxx..."
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        bits = value.bit_length()
        digits = len(str(abs(value))) if bits < 14_000 else int(bits * math.log10(2)) + 1
        return f"an integer of {_number(digits)} digits"
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_int(
    value: Any,
    parameter: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    fix: str | None = None,
    where: str | None = None,
) -> int:
    """``value`` if it is an int within ``[minimum, maximum]``; else a :class:`ConfigError`.

    A bool is refused (``True`` is an int to Python, never a count to a user). The error names
    ``parameter``, carries ``value`` and ``fix``; ``where`` prefixes the message (e.g. which
    engine's options).

    >>> check_int(2, "retries", minimum=0)
    2
    >>> check_int(True, "retries", minimum=0)
    Traceback (most recent call last):
        ...
    mai_graph.errors.ConfigError: retries must be an integer >= 0, got True
    >>> check_int(0, "n", minimum=1, maximum=1_000_000, fix="draw fewer")
    Traceback (most recent call last):
        ...
    mai_graph.errors.ConfigError: n must be an integer from 1 to 1,000,000, got 0. Fix: draw fewer
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
            return value
    if minimum is not None and maximum is not None:
        within = f" from {_number(minimum)} to {_number(maximum)}"
    elif minimum is not None:
        within = f" >= {_number(minimum)}"
    elif maximum is not None:
        within = f" <= {_number(maximum)}"
    else:
        within = ""
    prefix = f"{where}: " if where else ""
    raise ConfigError(
        f"{prefix}{parameter} must be an integer{within}, got {shown(value)}",
        parameter=parameter,
        value=value,
        fix=fix,
    )


def _bound(x: float) -> str:
    """``1,048,576`` for a whole bound, ``0.001`` otherwise."""
    return _number(int(x)) if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


def check_number(
    value: Any,
    parameter: str,
    *,
    above: float | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    unit: str | None = None,
    fix: str | None = None,
    where: str | None = None,
) -> float:
    """``value`` if it is a finite number in range; else a :class:`ConfigError`.

    ``above`` is an exclusive lower bound, ``minimum`` / ``maximum`` inclusive ones; ``unit``
    names the unit in the message. NaN, the infinities and bools are refused
    (``float("inf") > 0`` would pass a bare range check).

    >>> check_number(2, "kv_cache_gib", above=0)
    2
    >>> check_number(float("inf"), "kv_cache_gib", above=0, maximum=1024)
    Traceback (most recent call last):
        ...
    mai_graph.errors.ConfigError: kv_cache_gib must be a finite number > 0 and <= 1024, got inf
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        finite = isinstance(value, int) or math.isfinite(value)
        if (
            finite
            and (above is None or value > above)
            and (minimum is None or value >= minimum)
            and (maximum is None or value <= maximum)
        ):
            return value
    bounds = [f"> {_bound(above)}" if above is not None else "",
              f">= {_bound(minimum)}" if minimum is not None else "",
              f"<= {_bound(maximum)}" if maximum is not None else ""]  # fmt: skip
    within = " and ".join(b for b in bounds if b)
    prefix = f"{where}: " if where else ""
    kind = f"a number of {unit}" if unit else "a finite number"
    raise ConfigError(
        f"{prefix}{parameter} must be {kind}{' ' + within if within else ''}, got {shown(value)}",
        parameter=parameter,
        value=value,
        fix=fix,
    )
