"""Serving the endpoint's app: uvicorn's configuration, the API keys, the memory bound.

:func:`serve` runs an app of :func:`~mai_graph.adapters.endpoint.app.create_app` under
uvicorn until stopped; :func:`server_config` is its configuration, :func:`api_keys_from` the
keys of ``mai-graph serve`` and :func:`memory_bound` what request handling may hold beyond the
engines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mai_graph.adapters.endpoint.app import MAX_BODY_BYTES, MAX_PREPARING
from mai_graph.errors import ConfigError
from mai_graph.inputs.sources import ImagePolicy

__all__ = [
    "DECODE_BYTES_PER_PIXEL",
    "LOOPBACK",
    "SHUTDOWN_TIMEOUT_S",
    "api_keys_from",
    "check_shutdown_timeout",
    "memory_bound",
    "serve",
    "server_config",
]

LOOPBACK = ("127.0.0.1", "::1", "localhost")
"""Addresses a server without API keys may listen on."""


SHUTDOWN_TIMEOUT_S = 10.0
"""How long a stopping server (SIGTERM, Ctrl-C) waits for runs in flight before cancelling
them; the engines then abort their requests and shut down."""


def memory_bound(
    *,
    max_preparing: int = MAX_PREPARING,
    max_body_bytes: int = MAX_BODY_BYTES,
    policy: ImagePolicy | None = None,
) -> int:
    """Most bytes the endpoint's request handling holds beyond its resting process.

    Requests being prepared (at most ``max_preparing``) each hold their body, its parsed
    JSON, one encoded image and its decoding (Pillow's image in its own mode and the copies
    converting it to RGB make: :data:`DECODE_BYTES_PER_PIXEL`, up to ``policy.max_pixels``);
    each image's pixels are checked
    against the question's total before it is decoded, and the body against its cap before it
    is read whole. Decoded pixels kept between loads are the pixel cache's
    (``$MAI_GRAPH_PIXEL_CACHE_MB``). Requests waiting for admission hold nothing: their
    bodies stay unread. Not counted: the engines' own memory, and on in-process engines the
    pixels of the images that running model calls send (docs/reliability.md).

    >>> round(memory_bound() / 1e6)
    2164
    """
    from mai_graph.inputs.images import pixel_cache_limit
    from mai_graph.inputs.sources import DEFAULT_MAX_BYTES

    policy = ImagePolicy.from_env() if policy is None else policy
    encoded = policy.max_bytes or DEFAULT_MAX_BYTES
    per_request = 2 * max_body_bytes + encoded + DECODE_BYTES_PER_PIXEL * policy.max_pixels
    return pixel_cache_limit() + max_preparing * per_request


DECODE_BYTES_PER_PIXEL = 20
"""Peak bytes a pixel costs while an image is decoded and converted to RGB: measured with
``resolve_images`` on 8000x5000 PNGs (palette with transparency 21, RGBA 20, 16-bit grey 11,
RGB 4 bytes a pixel beyond the file), less what the RGB copy shares."""


def check_shutdown_timeout(value: Any) -> None:
    """Refuse a shutdown timeout that is not a number of seconds >= 0 (``ConfigError``)."""
    if isinstance(value, bool) or not (
        isinstance(value, int | float) and math.isfinite(value) and value >= 0
    ):
        raise ConfigError(
            f"the shutdown timeout must be a number of seconds >= 0, got {value!r}",
            parameter="--shutdown-timeout",
            value=value,
            fix="give the seconds a stop waits for running requests, e.g. 10",
        )


def server_config(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "warning",
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
) -> Any:
    """The uvicorn configuration :func:`serve` runs ``app`` with.

    A stop waits at most ``shutdown_timeout_s`` for requests in flight (an abandoned one
    included), then cancels them and runs the app's shutdown (engines stopped).
    """
    import uvicorn

    check_shutdown_timeout(shutdown_timeout_s)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        # typed int, but uvicorn waits with asyncio.wait_for, which takes any seconds
        timeout_graceful_shutdown=shutdown_timeout_s,  # type: ignore[arg-type]
    )


def serve(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "warning",
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
) -> None:
    """Serve ``app`` with uvicorn until stopped (one process; engines shared by requests).

    SIGTERM or Ctrl-C stops accepting requests, waits at most ``shutdown_timeout_s`` for those
    in flight, cancels the rest and shuts the engines down.
    """
    import uvicorn

    config = server_config(
        app, host=host, port=port, log_level=log_level, shutdown_timeout_s=shutdown_timeout_s
    )
    uvicorn.Server(config).run()


def api_keys_from(env: Mapping[str, str], key_file: str | None = None) -> list[str]:
    """The endpoint's keys: ``key_file`` (one a line) or ``MAI_GRAPH_SERVE_API_KEY`` (commas).

    >>> api_keys_from({"MAI_GRAPH_SERVE_API_KEY": "k1, k2"})
    ['k1', 'k2']
    """
    if key_file:
        try:
            with open(key_file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the API key file {key_file}: {exc.strerror}",
                parameter="--api-key-file",
                value=key_file,
                fix="give a readable file with one key a line",
            ) from None
        keys = [line.strip() for line in lines if line.strip()]
        if not keys:
            raise ConfigError(
                f"the API key file {key_file} holds no key",
                parameter="--api-key-file",
                value=key_file,
            )
        return keys
    return [k.strip() for k in env.get("MAI_GRAPH_SERVE_API_KEY", "").split(",") if k.strip()]
