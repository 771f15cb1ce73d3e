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
