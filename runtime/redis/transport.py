"""The Redis streams transport: actors across processes and hosts, durably.

Every envelope is msgpack on the stream of its recipient's shard (a stable hash
of the address). A *worker* transport owns shards through leases (see
``actormem.runtime.redis._leases``) and reads each owned shard through the consumer group
``workers``; it delivers entries to its runtime's local cells and XACKs an entry
only once the handler's effect is stored (the runtime's ``handled`` hook): for a
:class:`~actormem.runtime.redis.durable.Durable` actor the state changes, the command's id
and the XACK are one fenced Lua call. A *client* transport (``worker=False``)
only sends, and reads the replies to its asks from its own reply stream.

Delivery is at least once; effects are exactly once: every envelope has a
command id set once by its producer, and a command whose id the agent already
applied (a redelivery, or a second XADD after a lost reply) is acked and skipped.
Entries that cannot be decoded, are too large, or fail ``max_deliveries`` times
go to the dead-letter stream with the reason, and the consumer carries on.

Sending is asynchronous: ``tell`` returns once the envelope is queued in the
outbox (bounded; a full outbox, or a shard stream over ``stream_limit``, makes
senders wait), and a background task XADDs the queue in order, in pipelined
batches, retrying while Redis is away; :meth:`RedisTransport.flush` waits until
everything queued is in Redis, and closing flushes too. Tells a handler sends
go out when it runs, not when its commit lands, so a redelivered command sends
them again, but with the same ids (``<command id>.<n>``): their recipients skip
what they already applied. Asks it makes, and effects outside the runtime (an
LLM call, a file), happen again.

A durable actor's changes are stored by *group commits*: one fenced call per
shard stores every command handled while the previous call was in flight, and
the replies to those commands are sent only once their changes are stored. A
handler failure is retried at once, before the agent's later commands, up to
``max_deliveries`` times (or while the actor's restart budget lasts), then the
command is dead-lettered.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import msgspec
import redis.asyncio as aioredis
import structlog

from actormem.runtime._actor import Actor
from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import (
    MailboxFullError,
    MessageDecodeError,
    MessageTooLargeError,
    RuntimeClosedError,
    TransportError,
    TransportUnavailableError,
)
from actormem.runtime.ids import new_id
from actormem.runtime.redis._client import (
    blocking_twin,
    check_server,
    connect,
    redis_errors,
    retrying,
)
from actormem.runtime.redis._consumer import (
    Agent,
    Shard,
    StreamEnvelope,
    activated,
    consume,
    fan_out,
    flush_acks,
    flush_commits,
    handled,
    retry,
    starting,
)
from actormem.runtime.redis._leases import LeaseManager
from actormem.runtime.redis._outbox import NO_DEADLINE, Outbox
from actormem.runtime.redis._server import EmbeddedRedis
from actormem.runtime.redis.codec import Codec, default_codec
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.keys import Keys, shard_of
from actormem.runtime.transports.base import Transport, TransportHost

__all__ = ("RedisTransport", "RedisTransportStats")

log = structlog.get_logger("actormem.redis")

T = TypeVar("T")

#: Entries read per XREAD of a reply or broadcast stream.
_BATCH: Final = 1_000
#: Reply streams outlive a silent client by this long (ms).
_REPLY_TTL_MS: Final = 3_600_000
#: Entries kept in a reply stream, approximately, by its writers. The client trims
#: what it has read, so only a client this far behind loses replies (its asks then
#: time out): a bound for a client that stopped reading, not a working size.
_REPLY_MAXLEN: Final = 100_000
#: How often a client forgets the asks whose deadline passed (s).
_EXPIRE_EVERY: Final = 1.0
#: Entries kept in the broadcast and dead-letter streams, approximately.
_SIDE_MAXLEN: Final = 100_000
#: How often a waiting loop looks whether the runtime opened (s).
_OPEN_POLL: Final = 0.01
#: Pause between a worker's registration and its first shard acquisition (s).
_FIRST_ROUND_PAUSE: Final = 0.5
#: Longest pause of a background loop while Redis is away (s).
_MAX_LOOP_BACKOFF: Final = 2.0


class RedisTransportStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one Redis transport's counters.

    Attributes:
        worker: the transport's id (in leases and consumer groups).
        owned_shards: the shards it owns now.
        agents: actors it tracks on those shards.
        outbox: envelopes queued for XADD.
        expired_unsent: asks, and replies to asks, dropped from the outboxes
            because their deadline passed while they were queued.
        pending_asks: asks waiting for their reply.
        redelivered: entries delivered again (after a failure or a worker's death).
        duplicates: commands skipped because their id was already applied.
        dead_lettered: entries moved to the dead-letter stream.
    """

    worker: str
    owned_shards: list[int]
    agents: int
    outbox: int
    expired_unsent: int
    pending_asks: int
    redelivered: int
    duplicates: int
    dead_lettered: int


class RedisTransport(Transport):
    """Carries envelopes over Redis streams (see the module docstring).

    Args:
        redis: a client (kept open: the caller owns it), a URL (a client is made
            and closed here), or None for ``config.url``, else an embedded server
            started on open and stopped on close.
        config: the ``[redis]`` section.
        worker: own shards and host actors (True), or only send and ask (False).
        codec: how bodies, replies and errors are encoded (the default codec,
            where :func:`~actormem.runtime.redis.codec.register_message_types` registers).
        worker_id: this process's name in leases and consumer groups.

    Example::

        transport = RedisTransport("redis://127.0.0.1:6380", RedisConfig(shards=8))
        async with Runtime(transport=transport) as rt:
            rt.register("echo", Echo)
            assert await rt.ref("echo/a").ask("hi") == "hi"
    """

    name = "redis"

    def __init__(
        self,
        redis: aioredis.Redis | str | None = None,
        config: RedisConfig | None = None,
        *,
        worker: bool = True,
        codec: Codec | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.config = config or RedisConfig()
        self.keys = Keys(self.config.prefix)
        # Every shard's stream name, made once (one per command sent otherwise).
        self._streams = [self.keys.stream(n) for n in range(self.config.shards)]
        self.codec = codec or default_codec
        self.worker = worker
        self.id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._given = redis
        self._client: aioredis.Redis | None = None
        self._blocking: aioredis.Redis | None = None
        self._stack = AsyncExitStack()
        self._host: TransportHost | None = None
        # runtime.shed_expired_asks of the runtime that opened this transport.
        self._shed = True
        self._state = "new"
        self._replies = self.keys.replies(self.id)
        self._reply_stream = re.compile(
            re.escape(self.config.prefix) + r":\{r:[A-Za-z0-9._-]{1,200}\}:replies"
        )
        # correlation -> (reply type, deadline, address asked)
        self._asks: dict[int, tuple[Any, float, str]] = {}
        # (stream, data) waiting for XADD: one queue, so a sender's messages
        # reach the streams in the order they were sent.
        self._outbox = Outbox(
            lambda: self.client, self.config.outbox_size, self.config.stream_limit
        )
        # Replies to the asks handled here, written in pipelined batches too.
        self._reply_box = Outbox(
            lambda: self.client,
            self.config.outbox_size,
            _REPLY_MAXLEN * 10,
            field=b"r",
            maxlen=_REPLY_MAXLEN,
            expire_ms=_REPLY_TTL_MS,
        )
        self.shards: dict[int, Shard] = {}
        self.agents: dict[str, Agent] = {}
        # Attempt counters of redelivered entries whose handling returned, to delete.
        self.finished_attempts: list[str] = []
        self._leases: LeaseManager | None = None
        self.dead_lettered = 0
        self.duplicates = 0
        self.redelivered = 0

    def __repr__(self) -> str:
        return f"RedisTransport(id={self.id!r}, worker={self.worker}, state={self._state!r})"

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self, host: TransportHost) -> None:
        if self._state != "new":
            raise RuntimeError("a RedisTransport can be opened only once")
        self._state = "open"
        self._host = host
        self._shed = host.shed_expired_asks
        try:
            await self._connect()
            # The loops run in the runtime's task group: they end when it closes,
            # after the mailboxes drained and before this transport's aclose.
            # The reply stream is this transport's own (its id is new): read it all.
            host.spawn(self._tail, self._replies, "0-0", b"r", self._accept_reply, True)
            host.spawn(self._outbox_loop, self._outbox)
            host.spawn(self._outbox_loop, self._reply_box)
            if self.worker:
                await self._start_worker(host)
        except BaseException:
            await self.aclose()
            raise
        log.info("redis_transport_opened", id=self.id, worker=self.worker)

    async def _connect(self) -> None:
        given = self._given
        if isinstance(given, aioredis.Redis):
            client = given
        else:
            url = given or self.config.url
            if not url:
                server = EmbeddedRedis(aof=self.config.aof)
                await self._stack.enter_async_context(server)
                url = server.url
            client = connect(self.config, url)
            self._stack.push_async_callback(client.aclose)
        self._client = client
        await check_server(client, self.config)
        # Blocking reads (one per owned shard) get a pool of their own.
        blocking = blocking_twin(client, self.config.shards + 4)
        if blocking is not client:
            self._stack.push_async_callback(blocking.aclose)
        self._blocking = blocking
        # Runs first on close (callbacks unwind last in, first out), while the
        # clients are still open: give the leases back, delete the reply stream.
        self._stack.push_async_callback(self._leave)

    async def _start_worker(self, host: TransportHost) -> None:
        leases = LeaseManager(
            self.client,
            self.keys,
            self.id,
            self.config.shards,
            self.config.lease_ms,
            self._gained,
            self._lost,
        )
        self._leases = leases
        # Broadcasts count from now: those sent before this worker started are old.
        stream = self.keys.broadcast()
        start = await self._stream_end(stream)
        host.spawn(self._tail, stream, start, b"e", partial(fan_out, self))
        host.spawn(self._lease_loop)
        host.spawn(self._passivate_loop)

    async def aclose(self) -> None:
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()
        self._state = "closed"
        self._host = None
        self.shards.clear()
        self.agents.clear()
        log.debug("redis_transport_closed", id=self.id)

    async def _leave(self) -> None:
        """Give the leases back at once (other workers take the shards over without
        waiting for them to expire) and delete this client's reply stream."""
        if self._outbox and self._client is not None:
            with anyio.move_on_after(self.config.retry_for, shield=True):
                await self.forever("outbox", self._outbox.write_all)
            if self._outbox:
                log.error("outbox_not_flushed", envelopes=len(self._outbox))
        leases = self._leases
        for shard in self.shards.values():
            shard.scope.cancel()
            # The runtime has stopped: store what was handled (and answer it); what
            # is still in flight stays pending, for the next owner, and the release
            # below need not wait for it.
            await self._settle(shard, self.config.retry_for)
            shard.inflight.clear()
        if self._reply_box and self._client is not None:
            with anyio.move_on_after(self.config.retry_for, shield=True):
                await self.forever("replies", self._reply_box.write_all)
            if self._reply_box:
                log.error("replies_not_sent", replies=len(self._reply_box))
        if leases is not None:
            with anyio.move_on_after(self.config.socket_timeout, shield=True):
                try:
                    await leases.release_all()
                except TransportError as exc:
                    log.warning("shard_release_failed", reason=str(exc))
        if self._client is not None:
            with anyio.move_on_after(self.config.socket_timeout, shield=True):
                try:
                    with redis_errors("deleting the reply stream"):
                        await self._client.delete(self._replies)
                except TransportError:
                    pass

    @property
    def client(self) -> aioredis.Redis:
        """The client for commands (raises :class:`RuntimeClosedError` when closed)."""
        client = self._client
        if client is None or self._state == "closed":
            raise RuntimeClosedError("the Redis transport is not open")
        return client

    @property
    def blocking_client(self) -> aioredis.Redis:
        """The client for blocking reads (its own pool)."""
        client = self._blocking
        if client is None or self._state == "closed":
            raise RuntimeClosedError("the Redis transport is not open")
        return client

    @property
    def host(self) -> TransportHost:
        """The runtime this transport delivers to."""
        return self._require_host()

    def lease_fresh(self, shard: int) -> bool:
        """True while this worker's lease on ``shard`` was recently renewed."""
        return self._leases is not None and self._leases.fresh(shard)

    def _require_host(self) -> TransportHost:
        host = self._host
        if host is None:
            raise RuntimeClosedError("the Redis transport is closed")
        return host

    # -- sending ---------------------------------------------------------------------------

    def _expires(self, envelope: Envelope) -> float:
        """When ``envelope`` (an ask, or the reply to one) may be dropped unsent."""
        deadline = envelope.deadline
        return deadline if deadline is not None and self._shed else NO_DEADLINE

    def _prepare(self, envelope: Envelope) -> tuple[str, bytes, float]:
        if not envelope.id:
            envelope.id = new_id()
        if envelope.correlation is not None and envelope.reply_to is None:
            envelope.reply_to = self._replies
            reply_type = getattr(type(envelope.body), "reply_type", Any)
            deadline = envelope.deadline or time.time() + 3600
            self._asks[envelope.correlation] = (reply_type, deadline, envelope.recipient)
        data = self.codec.encode_envelope(envelope)
        if len(data) > self.config.max_message_bytes:
            raise MessageTooLargeError(
                f"{type(envelope.body).__name__} for {envelope.recipient} encodes to "
                f"{len(data)} bytes, over max_message_bytes={self.config.max_message_bytes}"
            )
        stream = self._streams[shard_of(envelope.recipient, self.config.shards)]
        return stream, data, self._expires(envelope)

    async def send(self, envelope: Envelope) -> None:
        """Queue ``envelope`` for its shard's stream; wait only while the outbox is full.

        A background task XADDs what is queued in pipelined batches, in order,
        retrying with backoff while Redis is away; a retry sends the same bytes
        (the same command id), so an XADD that succeeded but whose reply was lost
        causes no second effect. :meth:`flush` waits until all is written.

        Raises:
            MessageTooLargeError: the encoded envelope is over ``max_message_bytes``.
            TransportError: the body's type is not registered (nothing is queued).
        """
        item = self._prepare(envelope)
        self._require_host()
        await self._outbox.put(item)

    def send_nowait(self, envelope: Envelope) -> None:
        """Queue ``envelope`` now, or raise; never waits (see :meth:`send`).

        Raises:
            MailboxFullError: ``outbox_size`` envelopes are already queued.
            MessageTooLargeError, TransportError: as :meth:`send`.
        """
        if self._outbox.full():
            raise MailboxFullError(
                envelope.recipient,
                f"the Redis outbox is full ({self.config.outbox_size} envelopes queued)",
            )
        item = self._prepare(envelope)
        self._require_host()
        self._outbox.put_nowait(item)

    async def flush(self) -> None:
        """Wait until every envelope queued so far is in Redis."""
        await self._outbox.flush()

    async def _outbox_loop(self, outbox: Outbox) -> None:
        while True:
            await outbox.wait_ready()
            await self.forever("outbox", outbox.write_all)

    async def publish(self, kind: str, message: Any) -> None:
        """Tell ``message`` to every active actor of ``kind`` on every worker.

        Each worker fans the broadcast out to the actors of that kind it has in
        memory; an actor not active anywhere does not get it.

        Raises:
            MessageTooLargeError, TransportError: as :meth:`send`.
        """
        envelope = Envelope(recipient=f"{kind}/*", body=message, id=new_id())
        data = self.codec.encode_envelope(envelope)
        if len(data) > self.config.max_message_bytes:
            raise MessageTooLargeError(
                f"broadcast {type(message).__name__} encodes to {len(data)} bytes, "
                f"over max_message_bytes={self.config.max_message_bytes}"
            )

        async def add() -> None:
            with redis_errors("XADD to the broadcast stream"):
                await self.client.xadd(
                    self.keys.broadcast(), {b"e": data}, maxlen=_SIDE_MAXLEN, approximate=True
                )

        await retrying(add, what="publish", retry_for=self.config.retry_for)

    async def reply(self, envelope: Envelope, reply: Reply) -> None:
        """XADD ``reply`` to the asker's reply stream (a lost reply times the ask out).

        A reply to an ask made through this same transport is handed over in
        memory: it would only travel to Redis and back into this process. A reply
        to a command whose changes wait for their group commit is sent after it.
        """
        if isinstance(envelope, StreamEnvelope) and envelope.commit is not None:
            envelope.commit.replies.append(reply)
            return
        await self.send_replies([(envelope, reply)])

    async def send_replies(self, replies: list[tuple[Envelope, Reply]]) -> None:
        """Queue ``replies`` (each to whoever asked its envelope) for the reply writer,
        which sends what gathered in one pipeline (waits only while it is full)."""
        for envelope, reply in replies:
            if envelope.reply_to is None or envelope.reply_to == self._replies:
                self._asks.pop(reply.correlation, None)
                self._require_host().resolve(reply)
                continue
            stream = envelope.reply_to
            if not self._reply_stream.fullmatch(stream):
                # A frame could name any key here (an agent's history, say): only
                # reply streams under our prefix may be written to.
                log.warning("reply_to_refused", reply_to=stream[:200], recipient=envelope.recipient)
                continue
            data = self.codec.encode_reply(reply)
            if len(data) > self.config.max_message_bytes:
                error = MessageTooLargeError(
                    f"the reply to {type(envelope.body).__name__} is {len(data)} bytes, "
                    f"over max_message_bytes={self.config.max_message_bytes}"
                )
                data = self.codec.encode_reply(Reply(reply.correlation, error=error))
            await self._reply_box.put((stream, data, self._expires(envelope)))

    # -- replies -------------------------------------------------------------------------------

    async def _tail(
        self,
        stream: str,
        last: str,
        field: bytes,
        handle: Callable[[bytes | None], Awaitable[None]],
        own: bool = False,
    ) -> None:
        """Read ``stream`` (no consumer group) after entry ``last`` for ever, handing
        each entry's ``field`` to ``handle``: a client's replies, the broadcasts.

        ``own``: the stream is this transport's alone (its replies), so what was
        read is trimmed off at once and the stream stays as short as the backlog.
        """
        blocking: Any = self.blocking_client
        next_expiry = time.monotonic() + _EXPIRE_EVERY
        while True:

            async def read(after: str = last) -> Any:
                with redis_errors(f"XREAD {stream}"):
                    return await blocking.xread(
                        {stream: after}, count=_BATCH, block=self.config.block_ms
                    )

            response = await self.forever(stream, read)
            for _stream, entries in response or ():
                for entry_id, fields in entries:
                    last = entry_id.decode()
                    await handle(fields.get(field))
            if own and response:
                await self.forever(stream, partial(self._trim_read, stream, last))
            if time.monotonic() >= next_expiry:
                # Once a second, not per read: with many asks pending, a scan per
                # read batch slowed the reader until replies were trimmed unread.
                next_expiry = time.monotonic() + _EXPIRE_EVERY
                self._expire_asks()

    async def _trim_read(self, stream: str, last: str) -> None:
        """Drop the entries of ``stream`` up to ``last`` (read and handled)."""
        ms, _, seq = last.partition("-")
        with redis_errors(f"XTRIM {stream}"):
            await self.client.xtrim(stream, minid=f"{ms}-{int(seq) + 1}", approximate=False)

    async def _accept_reply(self, data: bytes | None) -> None:
        host = self._host
        if host is None or data is None:
            return
        if len(data) > self.config.max_message_bytes:
            log.warning("reply_too_large", size=len(data))
            return
        try:
            correlation = self.codec.decode_reply(data).correlation
        except MessageDecodeError as exc:
            log.warning("reply_undecodable", reason=str(exc))
            return
        reply_type, _, address = self._asks.pop(correlation, (Any, 0.0, "?"))
        host.resolve(self.codec.decode_reply(data, reply_type, address))

    def _expire_asks(self) -> None:
        now = time.time()
        for correlation, (_, deadline, _) in list(self._asks.items()):
            if deadline < now:
                del self._asks[correlation]

    # -- background loops -------------------------------------------------------------------------

    async def forever(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Await ``call()`` until it succeeds, backing off while Redis is away.

        For the background loops, which must outlive a Redis restart: an
        unavailable server is waited for, and any other transport error is logged
        and tried again (a loop that died would silently stop a shard).
        """
        delay = 0.05
        failed = False
        while True:
            try:
                result = await call()
            except TransportUnavailableError as exc:
                if not failed:
                    log.warning("redis_unavailable", loop=what, reason=str(exc))
                    failed = True
            except TransportError as exc:
                log.error("redis_loop_error", loop=what, reason=str(exc))
                failed = True
            else:
                if failed:
                    log.info("redis_reconnected", loop=what)
                return result
            await anyio.sleep(delay)
            delay = min(delay * 2, _MAX_LOOP_BACKOFF)

    async def _lease_loop(self) -> None:
        leases = self._leases
        assert leases is not None
        await self.wait_host_open()
        # The first round only registers, then a short pause: enough for workers
        # started together to see each other, too short to delay a lone one.
        acquire = False
        pause = min(leases.interval, _FIRST_ROUND_PAUSE)
        while True:
            try:
                await leases.heartbeat(acquire=acquire)
            except TransportUnavailableError as exc:
                log.warning("lease_heartbeat_failed", reason=str(exc))
            else:
                acquire = True
            await anyio.sleep(pause if not acquire else leases.interval)

    async def wait_host_open(self) -> None:
        # Entries must not be delivered before the runtime is open and the user
        # has registered the actor kinds.
        while not self._require_host().is_open:  # noqa: ASYNC110 (startup only, no event)
            await anyio.sleep(_OPEN_POLL)

    async def _gained(self, number: int, lease: str) -> None:
        shard = self.shards[number] = Shard(number, lease)
        self._require_host().spawn(self._consume, shard)

    async def _lost(self, numbers: list[int], released: bool) -> None:
        shards = [self.shards[n] for n in numbers if n in self.shards]
        for shard in shards:
            shard.scope.cancel()  # read nothing more from it
        if released:
            # Let what was delivered finish and be acked before the leases go;
            # a third of a lease at most, so the other leases are renewed in time.
            with anyio.move_on_after(self.config.lease_ms / 3000):
                while any(shard.inflight for shard in shards):  # noqa: ASYNC110 (bounded)
                    await anyio.sleep(_OPEN_POLL)
            for shard in shards:
                await self._settle(shard, self.config.socket_timeout)
        for shard in shards:
            self.shards.pop(shard.number, None)
        host = self._host
        for address, agent in list(self.agents.items()):
            if agent.shard in numbers:
                del self.agents[address]
                if host is not None:
                    await host.passivate(address)

    async def _settle(self, shard: Shard, within: float) -> None:
        """Store ``shard``'s queued commits and flush its acks, for at most ``within`` s
        (what is not stored stays pending, for the next owner)."""
        with anyio.move_on_after(within, shield=True):
            try:
                await flush_commits(self, shard)
                await flush_acks(self, shard)
            except TransportError as exc:
                log.warning("commit_or_ack_failed", shard=shard.number, reason=str(exc))

    # -- consuming a shard -------------------------------------------------------------------------

    async def _consume(self, shard: Shard) -> None:
        with shard.scope:
            await consume(self, shard)

    async def _stream_end(self, stream: str) -> str:
        """The id of the newest entry of ``stream`` (``0-0`` if empty): read after it."""
        with redis_errors(f"reading {stream}"):
            newest: Any = await self.client.xrevrange(stream, count=1)
        return newest[0][0].decode() if newest else "0-0"

    async def _passivate_loop(self) -> None:
        after = self.config.passivate_after
        while True:
            await anyio.sleep(min(after / 2, 5.0))
            host = self._host
            if host is None:
                return
            cutoff = time.monotonic() - after
            for address, agent in list(self.agents.items()):
                idle = agent.durable and not agent.busy and agent.last_used < cutoff
                if idle and await host.passivate(address):
                    self.agents.pop(address, None)
                    log.debug("actor_passivated", actor=address)

    # -- the runtime's hooks ---------------------------------------------------------------

    async def activated(self, address: str, actor: Actor) -> None:
        """Load a durable actor's state from Redis before its ``on_start``."""
        await activated(self, address, actor)

    async def handled(self, envelope: Envelope, actor: Actor | None, ok: bool) -> bool:
        return await handled(self, envelope, actor, ok)

    async def starting(self, envelope: Envelope) -> None:
        await starting(self, envelope)

    async def retry(self, envelope: Envelope, allowed: bool) -> bool:
        return await retry(self, envelope, allowed)

    def dropped(self, envelope: Envelope) -> None:
        if isinstance(envelope, StreamEnvelope):
            shard = self.shards.get(envelope.shard)
            if shard is not None:
                shard.inflight.discard(envelope.entry)
            agent = self.agents.get(envelope.recipient)
            if agent is not None:
                agent.inflight.discard(envelope.id)
                agent.busy = max(agent.busy - 1, 0)

    # -- inspection -------------------------------------------------------------------------

    def settled(self) -> bool:
        """True when every command read here was handled and its changes stored
        (entries of effect-free commands may still wait for their batched XACK)."""
        return not any(shard.inflight or shard.commits for shard in self.shards.values())

    def owned_shards(self) -> list[int]:
        """The shards this worker owns now."""
        return sorted(self.shards)

    def stats(self) -> RedisTransportStats:
        """Return a snapshot of the counters (cheap enough to poll)."""
        return RedisTransportStats(
            worker=self.id,
            owned_shards=self.owned_shards(),
            agents=len(self.agents),
            outbox=len(self._outbox),
            expired_unsent=self._outbox.expired + self._reply_box.expired,
            pending_asks=len(self._asks),
            redelivered=self.redelivered,
            duplicates=self.duplicates,
            dead_lettered=self.dead_lettered,
        )
