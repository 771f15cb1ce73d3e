"""The endpoint's HTTP transport, bounded before any request reaches the app (and its key check).

uvicorn bounds a request head only with its h11 parser, and only while the head is incomplete
(``h11_max_incomplete_event_size``: a whole head that came in one read passes at any size;
httptools, uvicorn's default when installed, accumulates a header without limit), and bounds
neither the time a head may take to arrive nor how many connections are open.
:func:`bounded_protocol` is uvicorn's ``H11Protocol`` with those limits;
:func:`~mai_graph.adapters.endpoint.server.server_config` serves with it:

- a connection past ``max_connections`` open ones is answered 503 and closed as it is
  accepted, before a byte of it is read;
- a request head (request line and headers) must be complete within ``head_timeout_s`` of its
  first byte, and a new connection must start one within as long: else a 408 and the close;
- a head over ``max_head_bytes`` is a 431, whole or not, before h11 parses it (and
  uvicorn's plain-text 400s for input h11 refuses are OpenAI error bodies).

What a connection holds is then bounded (see :data:`~.server.CONNECTION_BYTES`). Body
reading is the app's: its size cap and minimum rate (:mod:`~mai_graph.adapters.endpoint.app`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from http import HTTPStatus
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from mai_graph.adapters.endpoint.schema import EndpointError

__all__ = ["BoundedH11Protocol", "bounded_protocol"]

log = logging.getLogger(__name__)

_HEAD_END = re.compile(rb"\n\r?\n")
"""The blank line that ends a head (h11 takes a bare LF too)."""

FULL_LOG_EVERY_S = 10.0
"""Refused connections are logged at most this often (a flood must not flood the log)."""


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a cap on open connections and a deadline for each head.

    It relies on these parts of uvicorn's ``H11Protocol`` (uvicorn 0.30 to 0.55):
    ``connection_made`` adding the protocol to ``server_state.connections`` (the count
    capped here); ``data_received`` feeding ``self.conn`` (an ``h11.Connection``, whose
    ``their_state`` is ``IDLE`` until a request's head is complete and whose
    ``trailing_data`` is what it holds unparsed) and calling ``handle_events``, which turns
    what h11 holds into requests (it is also called for a pipelined request once the one
    before it is answered: ``on_response_complete``); and ``send_400_response``, which
    uvicorn calls when h11 refuses the input.
    """

    max_connections: ClassVar[int] = 256
    max_head_bytes: ClassVar[int] = 8 * 1024
    head_timeout_s: ClassVar[float] = 5.0
    _last_full_log: ClassVar[float] = -FULL_LOG_EVERY_S

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Count the connection: refused (503) past ``max_connections``, else timed."""
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            now = time.monotonic()
            if now - type(self)._last_full_log >= FULL_LOG_EVERY_S:
                type(self)._last_full_log = now
                log.warning(
                    "refusing connections: %d are open, the limit (quiet for %g s)",
                    self.max_connections,
                    FULL_LOG_EVERY_S,
                )
            self._reply(
                EndpointError(
                    f"the server has {self.max_connections} connections open, its limit",
                    status=503,
                    kind="server_error",
                    code="too_many_connections",
                    fix="retry in a moment, or reuse one connection for several requests",
                )
            )
            return
        self._start_head_clock()

    def data_received(self, data: bytes) -> None:
        """Feed ``data`` to h11; a head's clock runs from its first byte until it is whole."""
        if self.transport.is_closing():  # refused: nothing more is read
            return
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._start_head_clock()  # a new request's head (keep-alive or pipelined)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in (or refused): no clock
            self._stop_head_clock()

    def handle_events(self) -> None:
        """Parse what h11 holds, unless it starts with a head over ``max_head_bytes`` (431).

        h11 bounds only an incomplete head; a whole one that came in one read (up to 256 KiB)
        would be parsed at any size.
        """
        if self.conn.their_state is h11.IDLE and self._head_too_long():
            self._reply(self._too_long())
            return
        super().handle_events()

    def on_response_complete(self) -> None:
        """Close a connection answered before its request's body was all received.

        Its body is not read on (a refused upload must not keep its connection busy), and
        no request that follows it is parsed unchecked.
        """
        if self.conn.their_state is not h11.DONE and not self.transport.is_closing():
            self.transport.close()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the head's clock, then uvicorn's own clean-up."""
        self._stop_head_clock()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """h11 refused the input: 431 when the head is over the limit, else 400, then close."""
        pending, _ = self.conn.trailing_data
        if len(pending) > self.max_head_bytes:
            self._reply(self._too_long())
            return
        self._reply(
            EndpointError(
                "the request is not valid HTTP/1.1",
                parameter="headers",
                code="invalid_http",
                fix="send a well-formed HTTP/1.1 request (any HTTP client does)",
            )
        )

    # -- the head's size ---------------------------------------------------------------------

    def _head_too_long(self) -> bool:
        """Whether the head h11 holds unparsed ends beyond ``max_head_bytes`` (or not yet)."""
        pending, _ = self.conn.trailing_data  # at most the limit and one read
        if len(pending) <= self.max_head_bytes:
            return False
        return _HEAD_END.search(pending, 0, self.max_head_bytes) is None

    def _too_long(self) -> EndpointError:
        return EndpointError(
            f"the request's head (request line and headers) is over the limit of "
            f"{self.max_head_bytes:,} bytes",
            status=431,
            parameter="headers",
            code="request_header_too_large",
            fix="send fewer or shorter headers",
        )

    # -- the head's deadline -----------------------------------------------------------------

    def _start_head_clock(self) -> None:
        self._stop_head_clock()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _stop_head_clock(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        pending, _ = self.conn.trailing_data
        if not pending:  # nothing was asked: close quietly (nginx does as much)
            self.transport.close()
            return
        self._reply(
            EndpointError(
                f"the request's head did not arrive within {self.head_timeout_s:g} s",
                status=408,
                parameter="headers",
                code="request_timeout",
                fix="send the request line and headers at once (any HTTP client does)",
            )
        )

    def _reply(self, error: EndpointError) -> None:
        """``error`` as an HTTP response written straight to the socket, then the close.

        Written raw because h11 can send a response only to a request it has parsed.
        """
        body = json.dumps(error.body()).encode()
        lines = [f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\n".encode()]
        for name, value in self.server_state.default_headers:  # date, server
            lines.append(name + b": " + value + b"\r\n")
        lines.append(b"content-type: application/json\r\n")
        lines.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(lines) + body)
        self.transport.close()
        self._stop_head_clock()


def bounded_protocol(
    *, max_connections: int, max_head_bytes: int, head_timeout_s: float
) -> type[BoundedH11Protocol]:
    """A :class:`BoundedH11Protocol` with these limits, for ``uvicorn.Config(http=...)``."""
    attrs: dict[str, Any] = {
        "max_connections": max_connections,
        "max_head_bytes": max_head_bytes,
        "head_timeout_s": head_timeout_s,
        "_last_full_log": -FULL_LOG_EVERY_S,
    }
    return type("BoundedH11Protocol", (BoundedH11Protocol,), attrs)
