"""Serving the endpoint's app: uvicorn's configuration, the API keys, the memory bound.

:func:`serve` runs an app of :func:`~mai_graph.adapters.endpoint.app.create_app` under
uvicorn until stopped; :func:`server_config` is its configuration (the transport bounded
before any request reaches the app: :mod:`~mai_graph.adapters.endpoint.transport`),
:func:`api_keys_from` the keys of ``mai-graph serve`` and :func:`memory_bound` what request
handling may hold beyond the engines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mai_graph.adapters.endpoint.app import MAX_BODY_BYTES, MAX_PREPARING
from mai_graph.errors import ConfigError, check_int
from mai_graph.inputs.sources import ImagePolicy

__all__ = [
    "CONNECTION_BYTES",
    "DECODE_BYTES_PER_PIXEL",
    "HEAD_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "LOOPBACK",
    "MAX_CONNECTIONS",
    "MAX_HEAD_BYTES",
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


MAX_CONNECTIONS = 256
"""Connections open at once; one more is answered 503 and closed as it is accepted, before
any of it is read (``server_config(max_connections=...)``)."""

MAX_HEAD_BYTES = 8 * 1024
"""Largest request head (request line and headers); a larger one is a 431 before it is
parsed. The ``openai`` client sends under 1 KiB; Apache allows a header field 8,190 bytes."""

HEAD_TIMEOUT_S = 5.0
"""Longest a request head may take to arrive from its first byte, and a new connection to
start one; a slower one is a 408 (or, with nothing sent, a close)."""

KEEP_ALIVE_S = 5
"""An idle keep-alive connection is closed after this many seconds (uvicorn's default)."""

READ_BYTES = 256 * 1024
"""The most one socket read hands the HTTP protocol (asyncio's and uvloop's read size)."""

BODY_BUFFER_BYTES = 64 * 1024
"""Body bytes uvicorn buffers for a request before it stops reading the socket
(``uvicorn.protocols.http.flow_control.HIGH_WATER_LIMIT``): all a request waiting for
admission holds of its body, besides one read."""

PARSED_BYTES_PER_HEAD_BYTE = 50
"""Peak bytes the parsed headers (h11's and uvicorn's lists of ``bytes``) cost per byte of a
head: measured with tracemalloc on heads of thousands of one-letter headers (49), the worst
case; ordinary headers cost a few bytes a byte."""

CONNECTION_BYTES = (
    MAX_HEAD_BYTES * (1 + PARSED_BYTES_PER_HEAD_BYTE) + BODY_BUFFER_BYTES + READ_BYTES + 48 * 1024
)
"""Most one open connection holds outside a request being prepared: its head and the parsed
headers, the body buffered while it waits, one read, and the connection's own objects
(48 KiB: uvicorn's protocol and transport, h11's state, the request's task). Measured on
`mai-graph serve`: 3.6 KB a connection with a partial head, 98 KB one holding a request
waiting for admission whose 7.6 KB head has 1,500 headers."""


def memory_bound(
    *,
    max_preparing: int = MAX_PREPARING,
    max_body_bytes: int = MAX_BODY_BYTES,
    policy: ImagePolicy | None = None,
    max_connections: int = MAX_CONNECTIONS,
) -> int:
    """Most bytes the endpoint's request handling holds beyond its resting process.

    Requests being prepared (at most ``max_preparing``) each hold their body, its parsed
    JSON, one encoded image and its decoding (Pillow's image in its own mode and the copies
    converting it to RGB make: :data:`DECODE_BYTES_PER_PIXEL`, up to ``policy.max_pixels``);
    each image's pixels are checked
    against the question's total before it is decoded, and the body against its cap before it
    is read whole. Decoded pixels kept between loads are the pixel cache's
    (``$MAI_GRAPH_PIXEL_CACHE_MB``). Every open connection (at most ``max_connections``,
    authenticated or not) holds at most :data:`CONNECTION_BYTES`: its head is capped
    (:data:`MAX_HEAD_BYTES`) and due within :data:`HEAD_TIMEOUT_S`, and the body of a
    request waiting for admission stays unread beyond uvicorn's buffer. Not counted: the
    engines' own memory, and on in-process engines the pixels of the images that running
    model calls send (docs/reliability.md).

    >>> round(memory_bound() / 1e6)
    2368
    """
    from mai_graph.inputs.images import pixel_cache_limit
    from mai_graph.inputs.sources import DEFAULT_MAX_BYTES

    policy = ImagePolicy.from_env() if policy is None else policy
    encoded = policy.max_bytes or DEFAULT_MAX_BYTES
    per_request = 2 * max_body_bytes + encoded + DECODE_BYTES_PER_PIXEL * policy.max_pixels
    connections = max_connections * CONNECTION_BYTES
    return pixel_cache_limit() + max_preparing * per_request + connections


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
    max_connections: int = MAX_CONNECTIONS,
    max_head_bytes: int = MAX_HEAD_BYTES,
    head_timeout_s: float = HEAD_TIMEOUT_S,
    log_config: dict[str, Any] | None = None,
) -> Any:
    """The uvicorn configuration :func:`serve` runs ``app`` with.

    The transport is bounded before any request reaches the app (and its key check): at
    most ``max_connections`` open, each request head at most ``max_head_bytes`` (431) and due
    within ``head_timeout_s`` (408); uvicorn's h11 parser with
    :class:`~mai_graph.adapters.endpoint.transport.BoundedH11Protocol`. A stop waits at
    most ``shutdown_timeout_s`` for requests in flight (an abandoned one included), then
    cancels them and runs the app's shutdown (engines stopped). ``log_config`` is uvicorn's
    (default: its own; uvicorn applies it as the configuration is made).
    """
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from mai_graph.adapters.endpoint.transport import bounded_protocol

    check_shutdown_timeout(shutdown_timeout_s)
    check_int(max_connections, "max_connections", minimum=1)
    check_int(max_head_bytes, "max_head_bytes", minimum=1024)
    _check_seconds(head_timeout_s, "head_timeout_s")
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=LOGGING_CONFIG if log_config is None else log_config,
        access_log=False,
        lifespan="on",
        http=bounded_protocol(
            max_connections=max_connections,
            max_head_bytes=max_head_bytes,
            head_timeout_s=head_timeout_s,
        ),
        h11_max_incomplete_event_size=max_head_bytes,  # h11's own guard, the same bound
        ws="none",  # no WebSocket route: an upgrade must not leave the bounded protocol
        timeout_keep_alive=KEEP_ALIVE_S,
        # typed int, but uvicorn waits with asyncio.wait_for, which takes any seconds
        timeout_graceful_shutdown=shutdown_timeout_s,  # type: ignore[arg-type]
    )


def _check_seconds(value: Any, parameter: str) -> None:
    if isinstance(value, bool) or not (
        isinstance(value, int | float) and math.isfinite(value) and value > 0
    ):
        raise ConfigError(
            f"{parameter} must be a number of seconds > 0, got {value!r}",
            parameter=parameter,
            value=value,
        )


def _log_config(log_level: str) -> dict[str, Any]:
    """Uvicorn's logging configuration, plus the ``mai_graph`` loggers on its stderr handler.

    At ``log_level``; for the server's own process (:func:`serve` applies it).
    """
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    level = log_level.upper() if isinstance(log_level, str) else log_level
    config["loggers"]["mai_graph"] = {"handlers": ["default"], "level": level, "propagate": False}
    return config


def serve(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    log_level: str = "warning",
    shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
    max_connections: int = MAX_CONNECTIONS,
) -> None:
    """Serve ``app`` with uvicorn until stopped (one process; engines shared by requests).

    SIGTERM or Ctrl-C stops accepting requests, waits at most ``shutdown_timeout_s`` for those
    in flight, cancels the rest and shuts the engines down. See :func:`server_config` for
    the transport's limits. The ``mai_graph`` loggers (a failed request's traceback among
    them) write to stderr with uvicorn's, at ``log_level``.
    """
    import uvicorn

    config = server_config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        shutdown_timeout_s=shutdown_timeout_s,
        max_connections=max_connections,
        log_config=_log_config(log_level),
    )
    uvicorn.Server(config).run()


def api_keys_from(env: Mapping[str, str], key_file: str | None = None) -> list[str]:
    """The endpoint's keys: ``key_file`` (one a line) or ``MAI_GRAPH_SERVE_API_KEY`` (commas).

    >>> api_keys_from({"MAI_GRAPH_SERVE_API_KEY": "k1, k2"}), api_keys_from({})
    (['k1', 'k2'], [])
    """
    if key_file:
        from mai_graph.files import read_text  # a regular file, bounded (no pipe, no /dev/zero)

        lines = read_text(key_file, flag="--api-key-file", what="API key file").splitlines()
        keys = [line.strip() for line in lines if line.strip()]
        if not keys:
            raise ConfigError(
                f"the API key file {key_file} holds no key",
                parameter="--api-key-file",
                value=key_file,
            )
        return keys
    raw = env.get("MAI_GRAPH_SERVE_API_KEY")
    keys = [k.strip() for k in (raw or "").split(",") if k.strip()]
    if raw and not keys:  # set, but to nothing: the operator meant a key, not an open server
        raise ConfigError(
            "MAI_GRAPH_SERVE_API_KEY is set but holds no key (only commas or spaces)",
            parameter="MAI_GRAPH_SERVE_API_KEY",
            fix="give one key or several separated by commas, or unset it for no key "
            "(loopback only)",
        )
    return keys
