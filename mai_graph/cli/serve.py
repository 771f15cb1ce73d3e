"""``mai-graph serve``: the OpenAI-compatible endpoint over the command line's backends.

The flags become :func:`~mai_graph.adapters.endpoint.app.create_app`'s arguments; the app is
served by :func:`~mai_graph.adapters.endpoint.server.serve`. Needs the ``serve`` extra.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Collection, Sequence
from typing import Any, Literal

from mai_graph.adapters.endpoint.app import create_app
from mai_graph.adapters.endpoint.server import (
    LOOPBACK,
    api_keys_from,
    check_shutdown_timeout,
    memory_bound,
    serve,
)
from mai_graph.adapters.endpoint.translate import CLIENT_SETTINGS
from mai_graph.context import MAIContext
from mai_graph.errors import ConfigError

__all__ = ["run_server"]


def _allowed_from_flags(flags: Sequence[str] | None) -> Collection[str] | Literal["all"]:
    """The settings ``--allow-setting`` lets clients change.

    None given: the safe default list; ``all``: every field; names: added to the default list.

    >>> sorted(_allowed_from_flags(["cot_max_tokens"]) - CLIENT_SETTINGS)
    ['cot_max_tokens']
    >>> _allowed_from_flags(["all"])
    'all'
    """
    if not flags:
        return CLIENT_SETTINGS
    if "all" in flags:
        return "all"
    return CLIENT_SETTINGS | set(flags)


def _names(side: Any) -> str:
    """A side of the lineup by name: one backend, or drafters / a chain joined with commas."""
    items = side if isinstance(side, list | tuple) else [side]
    return ", ".join(str(getattr(b, "name", b)) for b in items)


def run_server(args: Any, context: MAIContext, backends: tuple[Any, Any]) -> int:
    """``mai-graph serve``: the app over ``backends`` with uvicorn, engines started first."""
    check_shutdown_timeout(args.shutdown_timeout)
    keys = api_keys_from(os.environ, args.api_key_file)
    if not keys and args.host not in LOOPBACK:
        raise ConfigError(
            f"refusing to serve on {args.host} without an API key",
            parameter="--host",
            value=args.host,
            fix="set MAI_GRAPH_SERVE_API_KEY (or --api-key-file), or listen on 127.0.0.1",
        )
    small, large = backends
    app = create_app(
        small,
        large,
        model_name=args.model_name,
        api_keys=keys,
        context=context,
        allowed_settings=_allowed_from_flags(args.allow_setting),
        max_concurrency=args.max_concurrency,
        max_preparing=args.max_preparing,
        manage_backends=True,
    )
    auth = f"{len(keys)} API key(s)" if keys else "no API key (loopback only)"
    bound = memory_bound(max_preparing=args.max_preparing) / 1e6
    print(
        f"mai-graph: serving {args.model_name!r} at http://{args.host}:{args.port}/v1 "
        f"({_names(small)} + {_names(large)}; {auth}; requests hold at most {bound:,.0f} MB "
        "beyond the engines)",
        file=sys.stderr,
        flush=True,
    )
    serve(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        shutdown_timeout_s=args.shutdown_timeout,
    )
    return 0
