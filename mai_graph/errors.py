"""One error family for mai-graph: every error names the bad parameter, its value and the fix."""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendError",
    "ConfigError",
    "ImageAccessError",
    "ImageError",
    "ImageMismatchError",
    "MAIError",
    "check_int",
]

_MISSING = object()


class MAIError(Exception):
    """Base of all mai-graph errors.

    Attributes:
        parameter: The argument, setting or input field at fault (``None`` if not one field).
        value: The offending value, when there is one.
        fix: What to do about it, in one sentence.
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
        f"{prefix}{parameter} must be an integer{within}, got {value!r}",
        parameter=parameter,
        value=value,
        fix=fix,
    )
