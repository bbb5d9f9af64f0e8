"""A deadline on a request's headers (docs/security.md): a connection that has not
sent a whole request line and its headers within ``api_header_timeout_ms`` is closed.

Why: uvicorn has no such deadline. Its ``timeout_keep_alive`` runs only after a
reply, and every byte that arrives cancels it, so a client that trickles its
headers (slowloris), or connects and sends nothing, holds a connection, a file
descriptor, until the process runs out of them. An API reached directly (TLS
with ``MEMJOBS_API_TLS_CERT``, or loopback) has no proxy in front to bound it.

How, on uvicorn's public seams only (no subclass of its protocols, no reply
written here: the connection is closed, counted as ``header_timeout``):

- ``uvicorn.Config(http=...)`` takes a protocol class. :func:`header_deadline`
  gives one, :class:`HeaderDeadline`, that *holds* the protocol of the chosen
  parser (h11 or httptools) and forwards every ``asyncio.Protocol`` call to it.
  It arms one timer when the connection opens and when a byte arrives while no
  request of the connection is at work and no timer runs; the timer closes the
  transport when it fires. With TLS the bytes it sees are already decrypted
  (the handshake itself is bounded by asyncio, 60 s).
- The application is called exactly when a request's headers are complete.
  The held protocol is given the server's application state plus this
  connection (:data:`CONNECTION`), and uvicorn copies that state into each
  request's scope (the ASGI ``state`` extension, untouched by proxy headers).
  :class:`MarksRequests`, the outermost middleware, reads it there: the request
  is at work from the call (the timer is cancelled) until its response is
  complete (its last body message sent) or the application returns.

Keep-alive and pipelining follow: after a reply the connection is idle (the
keep-alive timeout's), and the first byte of the next request arms the deadline
again; a request pipelined behind one at work is read once that one's response
is complete. Cost per connection: one timer handle and one small dict; per
request: one timer armed and cancelled, one wrapped ``send``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

#: The key, in each request's ``scope["state"]``, of its connection's :class:`HeaderDeadline`.
CONNECTION = "memjobs_connection"


@dataclass(frozen=True)
class Rule:
    """What :class:`HeaderDeadline` holds and enforces (one per server)."""

    #: The parser's protocol class (uvicorn's, for ``h11`` or ``httptools``).
    held_class: Callable[..., asyncio.Protocol]
    #: Seconds from a request's first byte (or the connection's opening) to its last header.
    timeout_s: float
    #: Called once for each connection closed by the deadline (counts the refusal).
    on_expired: Callable[[], None]


class HeaderDeadline(asyncio.Protocol):
    """One connection: the parser's protocol, held, and the deadline on headers.

    Built by uvicorn with the arguments it gives any protocol class (``config``,
    ``server_state``, ``app_state``, ``_loop``); what to hold and the deadline
    are the class's :class:`Rule`, set by :func:`header_deadline`.
    """

    rule: ClassVar[Rule]

    __slots__ = ("held", "loop", "open_requests", "timer", "transport")

    def __init__(
        self,
        *,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.loop = _loop or asyncio.get_running_loop()
        self.timer: asyncio.TimerHandle | None = None
        self.open_requests = 0  # requests called whose response is not yet complete
        self.transport: asyncio.BaseTransport | None = None
        # The held protocol copies this state into each request's scope: MarksRequests finds
        # this connection there.
        self.held = self.rule.held_class(
            config=config, server_state=server_state, app_state={**app_state, CONNECTION: self}, _loop=_loop
        )

    # -- asyncio.Protocol, forwarded ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self._arm()
        self.held.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.timer is None and not self.open_requests:
            self._arm()  # the first byte of a request
        self.held.data_received(data)

    def eof_received(self) -> bool | None:
        return self.held.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.held.connection_lost(exc)

    def pause_writing(self) -> None:
        self.held.pause_writing()

    def resume_writing(self) -> None:
        self.held.resume_writing()

    # -- what MarksRequests tells -----------------------------------------------------------

    def request_started(self) -> None:
        """The application was called: the request's headers are in."""
        self.open_requests += 1
        self._disarm()

    def request_finished(self) -> None:
        """The request's response is complete (or its application returned)."""
        self.open_requests -= 1

    # -- the timer ------------------------------------------------------------------------

    def _arm(self) -> None:
        self.timer = self.loop.call_later(self.rule.timeout_s, self._expired)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        transport = self.transport
        if transport is None or transport.is_closing() or self.open_requests:
            return
        if transport.get_protocol() is not self:
            return  # upgraded (a WebSocket): the connection is no longer HTTP's
        self.rule.on_expired()
        transport.close()


def header_deadline(parser: str, timeout_s: float, on_expired: Callable[[], None]) -> type[HeaderDeadline]:
    """The protocol class to give ``uvicorn.Config(http=...)``: ``parser``'s (``h11`` or
    ``httptools``, as uvicorn would load it) held by :class:`HeaderDeadline`.

    Parameters:
        parser: uvicorn's name of the HTTP/1.1 implementation.
        timeout_s: the deadline, seconds.
        on_expired: called for each connection the deadline closes.
    """
    held = import_from_string(HTTP_PROTOCOLS[parser])
    attributes: dict[str, Any] = {"rule": Rule(held, timeout_s, on_expired), "__slots__": ()}
    if getattr(held, "alpn_protocols", None) is not None:
        attributes["alpn_protocols"] = held.alpn_protocols  # uvicorn reads it for TLS
    return type(f"HeaderDeadline{held.__name__}", (HeaderDeadline,), attributes)


class MarksRequests:
    """ASGI middleware, outermost: tells each request's connection (:data:`CONNECTION`
    in the scope's state, when served by :class:`HeaderDeadline`) when the request
    starts, and when its response is complete."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        connection = (scope.get("state") or {}).get(CONNECTION) if scope["type"] != "lifespan" else None
        if connection is None:
            await self.app(scope, receive, send)
            return
        connection.request_started()
        open_ = True

        def finished() -> None:
            nonlocal open_
            if open_:
                open_ = False
                connection.request_finished()

        async def sending(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                finished()

        try:
            await self.app(scope, receive, sending)
        finally:
            finished()
