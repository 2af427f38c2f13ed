"""uvicorn's h11 protocol and server with the bounds ``bpetok serve`` promises (imported only to serve).

What uvicorn leaves open, closed here at the connection level, below the ASGI app:

- **Request heads time out.** uvicorn arms its keep-alive timer only after a response, and any
  byte received cancels it: a client that connects and sends nothing, or half a request line,
  holds its connection (and a file descriptor, and a place under ``--limit-concurrency``)
  forever. Here the head of each request must arrive within ``header_timeout`` seconds of the
  connection opening (or of the end of the keep-alive wait after a response), else the
  connection is closed. (The body's own timeout is the app's: a 408.)
- **Unread answers time out.** A client that asks and never reads keeps the answer in the
  server's send buffer, and asyncio's ``close()`` waits for that buffer to drain, forever. Here
  a connection whose buffer stays full (the transport paused writing) for ``write_timeout``
  seconds, or that still holds unsent bytes ``write_timeout`` seconds after being closed, is
  aborted: its buffer is dropped and the app's answer stops.
- **Lingering close.** When the server closes a connection while the client is still sending a
  request body nobody read (a 413 to a client that sent ``Connection: close``, as Python's
  urllib does), closing at once would reset the connection under the client's writes, and the
  client would never read the answer. Here the server sends its answer, shuts down its sending
  side, then reads and discards what still arrives, up to ``linger_bytes`` and
  ``linger_seconds`` in all and ``linger_idle`` seconds without data, before closing, as nginx's
  lingering close does (its lingering_time and lingering_timeout).
- **Shutdown starts at the signal.** :class:`BoundedServer` stops listening and closes idle
  connections as soon as SIGTERM arrives, where uvicorn waits for its next 0.1 s tick and
  meanwhile serves what comes in. (uvicorn's ``timeout_graceful_shutdown`` then bounds the wait
  for running requests; the requests' work runs in daemon threads, which do not hold the exit.)
"""

from __future__ import annotations

import asyncio
from typing import cast

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["BoundedH11Protocol", "BoundedServer", "run_server"]


class _Transport:
    """The connection's transport as uvicorn sees it: ``close()`` lingers while a body is unread."""

    def __init__(self, transport: asyncio.Transport, protocol: BoundedH11Protocol):
        self._transport = transport
        self._protocol = protocol
        self._closing = False

    def __getattr__(self, name: str):
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._protocol._close_lingering()


class BoundedH11Protocol(H11Protocol):
    """:class:`H11Protocol` with head and write timeouts and a lingering close (module docstring).

    uvicorn builds one per connection; pass ``functools.partial(BoundedH11Protocol, ...)`` as
    ``uvicorn.Config(http=...)`` (a partial of this module-level class pickles, so ``--workers``
    processes get it too).
    """

    def __init__(
        self,
        *args,
        header_timeout: float,
        write_timeout: float,
        linger_seconds: float,
        linger_idle: float,
        linger_bytes: int,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout
        self.write_timeout = write_timeout
        self._write_timer: asyncio.TimerHandle | None = None
        self._shut_down = False
        self.linger_seconds = linger_seconds
        self.linger_idle = linger_idle
        self.linger_bytes = linger_bytes
        self._raw: asyncio.Transport  # the real transport, set by connection_made
        self._head_timer: asyncio.TimerHandle | None = None
        self._waiting_after: object = None  # the cycle whose successor's head the timer waits for
        self._linger_timer: asyncio.TimerHandle | None = None
        self._linger_idle_timer: asyncio.TimerHandle | None = None
        self._lingered = -1  # bytes discarded while lingering; -1: not lingering

    # -- the request-head timeout ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw = transport
        super().connection_made(cast(asyncio.Transport, _Transport(transport, self)))
        self._wait_for_head(self.header_timeout)

    def _wait_for_head(self, delay: float) -> None:
        self._cancel_head_timer()
        self._waiting_after = self.cycle
        self._head_timer = self.loop.call_later(delay, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_arrived(self) -> bool:
        # uvicorn makes a new RequestResponseCycle for each request head it parses
        return self.cycle is not self._waiting_after

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._head_arrived() and not self._raw.is_closing():
            self._close_raw()  # nothing to answer: the request never arrived

    def data_received(self, data: bytes) -> None:
        if self._lingered >= 0:
            self._lingered += len(data)
            if self._lingered > self.linger_bytes:
                self._close_raw()
            else:
                if self._linger_idle_timer is not None:
                    self._linger_idle_timer.cancel()
                self._linger_idle_timer = self.loop.call_later(self.linger_idle, self._close_raw)
            return
        super().data_received(data)
        if self._head_timer is not None and self._head_arrived():
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():  # idle for up to the keep-alive timeout, then the head's
            self._wait_for_head(self.timeout_keep_alive + self.header_timeout)
        super().on_response_complete()  # may start a pipelined request at once
        if self._head_timer is not None and self._head_arrived():
            self._cancel_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        for timer in (self._linger_timer, self._linger_idle_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """SIGTERM: uvicorn closes idle connections and lets running requests finish (its
        ``timeout_graceful_shutdown`` bounds the wait). A request whose body is still arriving
        has not started: it is dropped at once rather than waited for. Called once by
        :class:`BoundedServer` at the signal and again by uvicorn: the second call does nothing."""
        if self._shut_down:
            return
        self._shut_down = True
        if self.cycle is not None and not self.cycle.response_complete and self.conn.their_state is h11.SEND_BODY:
            self._close_raw()
            return
        super().shutdown()

    # -- the write timeout ---------------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout, self._write_timed_out)

    def resume_writing(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().resume_writing()

    def _write_timed_out(self) -> None:
        """The client read nothing for write_timeout seconds: drop what it did not read."""
        self._write_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True  # the app's next write returns at once; it hears http.disconnect
        self._raw.abort()

    def _close_raw(self) -> None:
        """Close the real transport; if unsent bytes remain, abort it write_timeout seconds later."""
        self._raw.close()
        if self._raw.get_write_buffer_size() and self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout, self._write_timed_out)



    # -- lingering close ---------------------------------------------------------------------------

    def _close_lingering(self) -> None:
        """Close, after discarding the rest of a request body the client may still be sending."""
        raw = self._raw
        self._cancel_head_timer()
        unread = self.conn.their_state is h11.SEND_BODY
        if raw.is_closing() or not unread or not raw.can_write_eof():
            self._close_raw()
            return
        self._lingered = 0
        raw.write_eof()  # the answer is flushed first; the client reads it once its body is sent
        raw.resume_reading()  # uvicorn pauses reading while a body waits for the app
        self._linger_timer = self.loop.call_later(self.linger_seconds, self._close_raw)
        self._linger_idle_timer = self.loop.call_later(self.linger_idle, self._close_raw)



# -- the server ----------------------------------------------------------------------------------------


class BoundedServer(uvicorn.Server):
    """``uvicorn.Server`` whose shutdown starts at the signal (module docstring)."""

    _loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig, frame) -> None:
        super().handle_exit(sig, frame)
        # A signal handler runs between two bytecodes of the loop's thread: hand the work to the loop.
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop_accepting)

    def _stop_accepting(self) -> None:
        for server in getattr(self, "servers", []):
            server.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()


def run_server(config: uvicorn.Config) -> None:
    """``uvicorn.run(app, ...)`` with :class:`BoundedServer`; exits with uvicorn's status 3 when the
    server could not start (e.g. the port is taken), as ``uvicorn.run`` does."""
    server = BoundedServer(config)
    server.run()
    if not server.started:
        raise SystemExit(3)
