"""Replies: the asks a transport waits on, its own reply stream, and the replies it
sends to the asks it handled.

Every transport reads its own reply stream (named after its id) from the start,
trimming what it has read before it reads on, and deletes it when it closes; a
stream expires ``reply_ttl_ms`` after the last reply written to it, so what a
client that died left unread goes then. The asks it made are matched to their
replies by correlation id and forgotten once their deadline passed. The replies to asks
handled here go through an outbox of their own, in pipelined batches, or, when
their command waited for a group commit, are written by the commit call itself
(see :meth:`Replies.stream_of`); a reply to an ask made through this same
transport is handed over in memory.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import structlog

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import (
    MessageDecodeError,
    MessageTooLargeError,
    RuntimeClosedError,
)
from actormem.runtime.redis._client import is_cluster, redis_errors
from actormem.runtime.redis._loops import delete_quietly, tail
from actormem.runtime.redis._outbox import NO_DEADLINE, Outbox
from actormem.runtime.redis._retry import forever
from actormem.runtime.redis._shards import StreamEnvelope

if TYPE_CHECKING:
    from actormem.runtime.redis._shards import Link

__all__ = ("Replies",)

log = structlog.get_logger("actormem.redis")

#: Entries kept in a reply stream, approximately, by its writers. The client trims
#: what it has read, so only a client this far behind loses replies (its asks then
#: time out): a bound for a client that stopped reading, not a working size.
_REPLY_MAXLEN: Final = 100_000
#: The field of a reply stream's entries that holds the reply.
_REPLY_FIELD: Final = b"r"
#: How long an ask without a deadline waits for its reply before it is forgotten (s).
_UNBOUNDED_ASK: Final = 3600
#: Reply stream names remembered as checked, at most (then forgotten together).
_REPLY_STREAMS_KNOWN: Final = 4096


class Replies:
    """The asks made through one transport and the replies it reads and writes.

    Args:
        link: the transport, whose id names its reply stream.
    """

    def __init__(self, link: Link) -> None:
        self._link = link
        self._config = config = link.config
        self._codec = link.codec
        #: This transport's reply stream.
        self.stream = link.keys.replies(link.id)
        self._reply_stream = re.compile(
            re.escape(config.prefix) + r":\{r:[A-Za-z0-9._-]{1,200}\}:replies"
        )
        #: runtime.shed_expired_asks of the runtime that opened the transport.
        self.shed = True
        # correlation -> (reply type, deadline, address asked)
        self._asks: dict[int, tuple[Any, float, str]] = {}
        #: Called with the correlation of each reply to an ask made here (see
        #: ``Handover.answered``).
        self.answered: Callable[[int], None] = _nothing
        # Reply stream names seen to be ones (a reply goes to each of a client's
        # asks: the pattern is matched once per stream, not once per reply).
        self._reply_streams: set[str] = set()
        # Whether a commit call may write replies (None: not known until connected).
        self._with_commits: bool | None = None
        #: Replies to the asks handled here, written in pipelined batches.
        self.outbox = Outbox(
            lambda: link.client,
            config.outbox_size,
            _REPLY_MAXLEN * 10,
            field=_REPLY_FIELD,
            maxlen=_REPLY_MAXLEN,
            # What a client that died left unread goes with its stream: a reply is
            # worth no more than the reply kept to answer its ask again.
            expire_ms=config.reply_ttl_ms,
        )

    @property
    def pending(self) -> int:
        """Asks waiting for their reply."""
        return len(self._asks)

    def expires(self, envelope: Envelope) -> float:
        """When ``envelope`` (an ask, or the reply to one) may be dropped unsent."""
        deadline = envelope.deadline
        return deadline if deadline is not None and self.shed else NO_DEADLINE

    def expect(self, envelope: Envelope) -> None:
        """Wait for the reply to ``envelope`` if it is an ask made here: its reply
        comes to this transport's stream."""
        if envelope.correlation is not None and envelope.reply_to is None:
            envelope.reply_to = self.stream
            reply_type = getattr(type(envelope.body), "reply_type", Any)
            deadline = envelope.deadline or time.time() + _UNBOUNDED_ASK
            self._asks[envelope.correlation] = (reply_type, deadline, envelope.recipient)

    async def reply(self, envelope: Envelope, reply: Reply) -> None:
        """Send ``reply`` to whoever asked ``envelope``, or, when the command's changes
        wait for their group commit, once they are stored."""
        if isinstance(envelope, StreamEnvelope) and envelope.commit is not None:
            envelope.commit.replies.append((envelope, reply))
            return
        await self.send([(envelope, reply, None)])

    def stream_of(self, envelope: Envelope) -> str | None:
        """The reply stream the group commit storing ``envelope``'s command writes its
        reply to, in the same call (so the reply costs no round trip of its own, and
        goes only if the command is stored); None when the reply goes through
        :meth:`send` instead: an ask made through this transport (answered in
        memory), one whose asker gave up, a stream no reply may go to, or any ask
        on a Redis Cluster (its reply stream is in another slot than the shard's
        keys)."""
        stream = envelope.reply_to
        if stream is None or stream == self.stream:
            return None
        with_commits = self._with_commits
        if with_commits is None:
            with_commits = self._with_commits = not is_cluster(self._link.client)
        if not with_commits or not self._is_reply_stream(stream):
            return None
        if self.shed and envelope.deadline is not None and envelope.deadline < time.time():
            return None
        return stream

    def _is_reply_stream(self, stream: str) -> bool:
        """True when ``stream`` names a reply stream under this transport's prefix."""
        known = self._reply_streams
        if stream in known:
            return True
        if not self._reply_stream.fullmatch(stream):
            return False
        if len(known) >= _REPLY_STREAMS_KNOWN:
            known.clear()
        known.add(stream)
        return True

    def stream_args(self) -> tuple[bytes, int, int]:
        """How a reply is written to a reply stream: its entry field, the length the
        stream is trimmed to (approximately), the stream's time to live (ms)."""
        return _REPLY_FIELD, _REPLY_MAXLEN, self._config.reply_ttl_ms

    def encode(self, envelope: Envelope, reply: Reply) -> bytes:
        """``reply`` to ``envelope`` as it goes on a reply stream (a reply over
        ``max_message_bytes`` becomes a :class:`MessageTooLargeError` saying so)."""
        data = self._codec.encode_reply(reply)
        if len(data) > self._config.max_message_bytes:
            error = MessageTooLargeError(
                f"the reply to {type(envelope.body).__name__} is {len(data)} bytes, "
                f"over max_message_bytes={self._config.max_message_bytes}"
            )
            data = self._codec.encode_reply(Reply(reply.correlation, error=error))
        return data

    async def send(self, replies: list[tuple[Envelope, Reply, bytes | None]]) -> None:
        """Queue ``replies`` (each to whoever asked its envelope, with its encoding if
        made already) for the reply writer, which sends what gathered in one pipeline
        (waits only while it is full)."""
        for envelope, reply, data in replies:
            if envelope.reply_to is None or envelope.reply_to == self.stream:
                self._asks.pop(reply.correlation, None)
                self.answered(reply.correlation)
                self._link.host.resolve(reply)
                continue
            stream = self._writable(envelope)
            if stream is not None:
                encoded = self.encode(envelope, reply) if data is None else data
                await self.outbox.put((stream, encoded, self.expires(envelope)))
                if self._link.trace is not None:
                    self._link.trace.reply_queued(envelope, self.outbox.appended)

    def _writable(self, envelope: Envelope) -> str | None:
        """The reply stream ``envelope`` names, if it is one a reply may go to."""
        stream = envelope.reply_to
        if stream is None or not self._is_reply_stream(stream):
            # A frame could name any key here (an actor's history, say): only
            # reply streams under our prefix may be written to.
            log.warning(
                "reply_to_refused", reply_to=(stream or "")[:200], recipient=envelope.recipient
            )
            return None
        return stream

    async def answer_again(self, envelope: Envelope, key: str) -> bool:
        """Answer ``envelope``, an ask whose command was applied already, with the
        reply its commit kept under ``key``; False when none is kept (the command
        stored nothing, was told, or its reply expired) or nobody waits any more.

        Raises:
            TransportError: Redis failed.
        """
        if envelope.correlation is None or envelope.reply_to is None:
            return False
        if envelope.deadline is not None and envelope.deadline < time.time():
            return False
        if envelope.reply_to == self.stream and envelope.correlation not in self._asks:
            # Asked through this transport and answered already (a copy of an ask
            # that was handed over, say) or given up: no read of the kept reply.
            return False
        with redis_errors("reading a kept reply"):
            data: bytes | None = await self._link.client.get(key)  # type: ignore[assignment]
        if data is None:
            return False
        if envelope.reply_to == self.stream:  # asked through this transport
            await self._accept(data)
            return True
        stream = self._writable(envelope)
        if stream is None:
            return False
        await self.outbox.put((stream, data, self.expires(envelope)))
        return True

    async def read(self) -> None:
        """Read this transport's reply stream for ever (it is new: all of it)."""
        await tail(
            self._link,
            self.stream,
            "0-0",
            b"r",
            self._accept,
            block_ms=self._config.block_ms,
            own=True,
            every_second=self._expire_asks,
        )

    async def _accept(self, data: bytes | None) -> None:
        try:
            host = self._link.host
        except RuntimeClosedError:
            return
        if data is None:
            return
        if len(data) > self._config.max_message_bytes:
            log.warning("reply_too_large", size=len(data))
            return
        try:
            correlation = self._codec.reply_correlation(data)
        except MessageDecodeError as exc:
            log.warning("reply_undecodable", reason=str(exc))
            return
        if self._link.trace is not None:
            self._link.trace.answered(correlation)
        reply_type, _, address = self._asks.pop(correlation, (Any, 0.0, "?"))
        self.answered(correlation)
        host.resolve(self._codec.decode_reply(data, reply_type, address))

    def _expire_asks(self) -> None:
        now = time.time()
        for correlation, (_, deadline, _) in list(self._asks.items()):
            if deadline < now:
                del self._asks[correlation]

    async def drain(self) -> None:
        """Send what is queued, for at most ``retry_for``."""
        if self.outbox:
            with anyio.move_on_after(self._config.retry_for, shield=True):
                await forever("replies", self.outbox.write_all)
            if self.outbox:
                log.error("replies_not_sent", replies=len(self.outbox))

    async def delete_stream(self) -> None:
        """Delete this transport's reply stream (a failure leaves it to expire)."""
        await delete_quietly(self._link, self.stream, "the reply stream")


def _nothing(correlation: int) -> None:
    """No one to tell that a reply came."""
