"""The Redis streams transport: actors across processes and hosts, durably.

Every envelope is msgpack on the stream of its recipient's shard (a stable hash
of the address). A *worker* transport owns shards through leases (``_owner``,
``_leases``) and reads the owned shards through the consumer group ``workers``
(``_intake``; one blocking read over them all, ``_shared_read``); it delivers
entries to its runtime's local cells and XACKs an entry only once the handler's
effect is stored (the runtime's ``handled`` hook, ``_commits``): for a
:class:`~actormem.runtime.state.Durable` actor the state changes, the command's id
and the XACK are one fenced Lua call. A *client*
transport (``worker=False``) only sends, and reads the replies to its asks from
its own reply stream (``_replies``).

Delivery is at least once; effects are exactly once: every envelope has a
command id set once by its producer, and a command whose id the actor already
applied (a redelivery, or a second XADD after a lost reply) is acked and skipped.
Entries that cannot be decoded, are too large, or fail ``max_deliveries`` times
go to the dead-letter stream with the reason (``_dead_letters``), and the
consumer carries on.

Sending is asynchronous: ``tell`` returns once the envelope is queued in the
outbox (bounded; a full outbox, or a shard stream over ``stream_limit``, makes
senders wait), and a background task XADDs the queue in order, in pipelined
batches, retrying while Redis is away; :meth:`RedisTransport.flush` waits until
everything queued is in Redis, and closing flushes too. Tells a handler sends
go out when it runs, not when its commit lands, so a redelivered command sends
them again, but with the same ids (``<command id>.<n>``): their recipients skip
what they already applied. Those not yet written when the command's commit is
stored are stored with it, and sent again by the shard's next owner
(``_unsent``). Asks it makes, and effects outside the runtime (an LLM call, a
file), happen again.

An ask a worker makes, or a tell one of its actors sends, to an actor of a shard it
owns is handed over in memory instead of going to the stream and back
(``_handover``): it is handled and stored as an entry read from the stream would
be, behind whatever this transport sent to that actor through the stream before
it, and goes through the stream after all when its command cannot be stored here
(a handler's tell is kept with its command's commit until its recipient's commit
stored it).

A durable actor's changes are stored by *group commits*: a fenced call per
shard stores every command handled while the previous call was in flight (up to
two calls in flight, for actors the other does not hold), and the replies to
those commands go only once their changes are stored, written by the call
itself where it can (see ``_commits``). A
handler failure is retried at once, before the actor's later commands, up to
``max_deliveries`` times (or while the actor's restart budget lasts), then the
command is dead-lettered.
"""

from __future__ import annotations

import functools
import os
import secrets
import socket
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
import msgspec
import redis.asyncio as aioredis
import structlog

from actormem.runtime._actor import Actor
from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime._handling import sending_for
from actormem.runtime.errors import (
    ActorError,
    MailboxFullError,
    MessageTooLargeError,
    RuntimeClosedError,
)
from actormem.runtime.ids import new_id
from actormem.runtime.redis._client import blocking_twin, check_server, connect, redis_errors
from actormem.runtime.redis._commits import GroupCommit
from actormem.runtime.redis._dead_letters import DeadLetters
from actormem.runtime.redis._handover import HandedEnvelope, HandedTell, Handover
from actormem.runtime.redis._intake import Intake
from actormem.runtime.redis._outbox import Outbox
from actormem.runtime.redis._owner import Owner
from actormem.runtime.redis._replies import Replies
from actormem.runtime.redis._retry import forever, retrying
from actormem.runtime.redis._server import EmbeddedRedis
from actormem.runtime.redis._shards import Holdings, RedeliveredEnvelope, StreamEnvelope
from actormem.runtime.redis._unowned import UnownedAsks
from actormem.runtime.redis._unsent import Unsent
from actormem.runtime.redis.codec import Codec, default_codec
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.keys import Keys, shard_of
from actormem.runtime.redis.trace import Tracer, attach, from_env
from actormem.runtime.transports.base import Transport, TransportHost

if TYPE_CHECKING:
    from actormem.runtime.metrics import Metrics

__all__ = ("RedisTransport", "RedisTransportStats")

log = structlog.get_logger("actormem.redis")

#: Entries kept in the broadcast stream, approximately.
_BROADCAST_MAXLEN: Final = 100_000
#: Seconds an ask waits at least before it is sent again.
_MIN_RESEND: Final = 0.1


class RedisTransportStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of one Redis transport's counters.

    Attributes:
        worker: the transport's id (in leases and consumer groups).
        owned_shards: the shards it owns now.
        actors: actors it serves on those shards.
        outbox: envelopes queued for XADD.
        expired_unsent: asks, and replies to asks, dropped from the outboxes
            because their deadline passed while they were queued.
        pending_asks: asks waiting for their reply.
        redelivered: entries delivered again (after a failure or a worker's death).
        duplicates: commands skipped because their id was already applied.
        dead_lettered: entries moved to the dead-letter stream.
        asks_resent: asks sent again, unchanged, because no reply came in time.
        answered_again: duplicate asks answered with the reply kept with their commit.
        leases_acquired: shard leases taken (or taken back) since start.
        leases_lost: shard leases lost since start (expired, or taken by another).
        handed_over: asks to actors of the shards this worker owns delivered in
            memory, not through the stream (see ``_handover``).
        failed_back: of those, asks sent through the stream after all (their
            command could not be stored here, or no reply came in time).
        tells_handed_over: tells sent by actors to actors of the shards this
            worker owns delivered in memory, not through the stream.
        tells_failed_back: of those, tells sent through the stream after all
            (their command could not be stored here).
    """

    worker: str
    owned_shards: list[int]
    actors: int
    outbox: int
    expired_unsent: int
    pending_asks: int
    redelivered: int
    duplicates: int
    dead_lettered: int
    asks_resent: int = 0
    answered_again: int = 0
    leases_acquired: int = 0
    leases_lost: int = 0
    handed_over: int = 0
    failed_back: int = 0
    tells_handed_over: int = 0
    tells_failed_back: int = 0


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
        self.config = config = config or RedisConfig()
        self.keys = keys = Keys(config.prefix)
        # Every shard's stream name, made once (one per command sent otherwise).
        self._streams = [keys.stream(n) for n in range(config.shards)]
        self.codec = codec = codec or default_codec
        self.worker = worker
        self.id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self._given = redis
        # Set on open when the server is an embedded one started here: no other
        # worker can reach it, so this one takes every shard in its first round.
        self._alone = False
        self._client: aioredis.Redis | None = None
        self._blocking: aioredis.Redis | None = None
        self._stack = AsyncExitStack()
        self._host: TransportHost | None = None
        self._state = "new"
        # (stream, data) waiting for XADD: one queue, so a sender's messages
        # reach the streams in the order they were sent.
        self._outbox = Outbox(lambda: self.client, config.outbox_size, config.stream_limit)
        self._asks_resent = 0
        self._held = Holdings()
        self._replies = Replies(self)
        self._unsent = Unsent(self, self._outbox)
        self._commits = GroupCommit(
            self, held=self._held, replies=self._replies, unsent=self._unsent
        )
        self._dead_letters = DeadLetters(self, commits=self._commits, replies=self._replies)
        self._intake = Intake(
            self,
            held=self._held,
            commits=self._commits,
            dead_letters=self._dead_letters,
            replies=self._replies,
            unsent=self._unsent,
            lease_fresh=self.lease_fresh,
        )
        self._handover = Handover(
            self,
            held=self._held,
            own_stream=self._replies.stream,
            lease_fresh=self.lease_fresh,
            written=lambda: self._outbox.finished,
            queued=lambda: self._outbox.appended,
            streams=self._streams,
        )
        self._unsent.sending_again = self._handover.sent_again
        self._unsent.handed_tells = self._handover.tells
        self._commits.tell_settled = self._tell_settled
        # The acks of what the replies answer go after them, in the same write.
        self._replies.outbox.riders = self._commits.riding
        self._replies.answered = self._handover.answered
        self._intake.handover = self._intake.shared.handover = self._handover
        self._owner = Owner(
            self,
            held=self._held,
            intake=self._intake,
            commits=self._commits,
            handover=self._handover,
            send_again=self._send_through_stream,
            tell_again=self._tell_through_stream,
        )
        self._unowned = UnownedAsks(self)
        #: Records the stages of its asks (None: off; see ``trace``).
        self.trace: Tracer | None = None
        attach(self, from_env())

    def __repr__(self) -> str:
        return f"RedisTransport(id={self.id!r}, worker={self.worker}, state={self._state!r})"

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self, host: TransportHost) -> None:
        if self._state != "new":
            raise RuntimeError("a RedisTransport can be opened only once")
        self._state = "open"
        self._host = host
        self._replies.shed = host.shed_expired_asks
        try:
            await self._connect()
            # The loops run in the runtime's task group: they end when it closes,
            # after the mailboxes drained and before this transport's aclose.
            host.spawn(self._replies.read)
            host.spawn(self._outbox_loop, self._outbox)
            host.spawn(self._outbox_loop, self._replies.outbox)
            host.spawn(self._unowned.run)
            if self.trace is not None:
                host.spawn(self.trace.watch_loop)
            if self.worker:
                await self._owner.start(host, alone=self._alone)
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
                self._alone = True
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

    async def aclose(self) -> None:
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()
        self._state = "closed"
        self._host = None
        self._held.clear()
        self._handover.clear()
        log.debug("redis_transport_closed", id=self.id)

    async def _leave(self) -> None:
        """Give the leases back at once (other workers take the shards over without
        waiting for them to expire) and delete this client's reply stream."""
        if self._outbox and self._client is not None:
            with anyio.move_on_after(self.config.retry_for, shield=True):
                await forever("outbox", self._outbox.write_all)
            if self._outbox:
                log.error("outbox_not_flushed", envelopes=len(self._outbox))
        await self._owner.settle_all()
        if self._client is not None:
            await self._replies.drain()
        await self._owner.release()
        if self._client is not None:
            await self._replies.delete_stream()

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
        return self._owner.fresh(shard)

    def _require_host(self) -> TransportHost:
        host = self._host
        if host is None:
            raise RuntimeClosedError("the Redis transport is closed")
        return host

    # -- sending ---------------------------------------------------------------------------

    def _prepare(
        self, envelope: Envelope, hand_over: bool = True
    ) -> tuple[str, bytes, float] | None:
        """``envelope`` as the outbox queues it, or None when it was handed over to a
        local actor instead (an ask, or an actor's tell, to a shard this worker owns,
        ``hand_over``: see ``_handover``)."""
        if not envelope.id:
            envelope.id = new_id()
        self._replies.expect(envelope)
        data = self.codec.encode_envelope(envelope)
        if len(data) > self.config.max_message_bytes:
            raise MessageTooLargeError(
                f"{type(envelope.body).__name__} for {envelope.recipient} encodes to "
                f"{len(data)} bytes, over max_message_bytes={self.config.max_message_bytes}"
            )
        shard = shard_of(envelope.recipient, self.config.shards)
        if hand_over and self.worker and self._hand_over(envelope, data, shard):
            return None
        for handed in self._handover.ahead(envelope):
            # Copies of what was handed over to it (before it) go first (see
            # ``_handover``); they may take the outbox a few entries over its size.
            item = self._prepare(handed, hand_over=False)
            assert item is not None
            self._outbox.put_nowait(item)
        if not envelope.resent:  # a copy: its ask is watched since it was first sent
            self._unowned.watch(envelope, shard)
            if self.trace is not None:  # queued next (see send, send_nowait)
                self.trace.sent(envelope, self._outbox.appended + 1)
        expires = self._replies.expires(envelope)
        self._handover.sent(envelope, shard, expires)
        return self._streams[shard], data, expires

    def _hand_over(self, envelope: Envelope, data: bytes, shard: int) -> bool:
        """Hand ``envelope`` (encoded as ``data``, to ``shard``) over in memory if it
        is an ask made here or a tell an actor sends (a handler's is kept with its
        command's commit), and may be (see ``_handover``)."""
        if envelope.correlation is not None:
            return self._handover.take(envelope, data, shard)
        command = sending_for(envelope.id)
        if command is None and envelope.sender is None:
            return False  # from code outside any actor: through the outbox (see flush)
        if command is not None and not isinstance(command, StreamEnvelope):
            return False  # a broadcast's handler: no commit keeps it
        item = (self._streams[shard], data, self._replies.expires(envelope))
        handed = self._handover.take_tell(envelope, item, shard)
        if handed is None:
            return False
        if command is not None:
            self._unsent.handed(command, envelope.id, handed)
        return True

    def _tell_settled(self, envelope: StreamEnvelope, stored: bool) -> None:
        """The commit of ``envelope``, a tell handed over, is over: done if ``stored``,
        else through the stream after all."""
        if stored:
            self._handover.stored_tell(envelope.id)
            return
        handed = self._handover.take_back_tell(envelope.id)
        if handed is not None:
            self._tell_through_stream(handed)

    def _tell_through_stream(self, handed: HandedTell) -> None:
        """Queue ``handed``, a tell that was handed over, for its shard's stream: the
        same id (its recipient applies it at most once). It may take the outbox a few
        entries over its size, as the copies of what was handed over do."""
        item = self._prepare(handed.envelope, hand_over=False)
        assert item is not None
        self._outbox.put_nowait(item)
        handed.settle(position=self._outbox.appended)

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
        if item is None:
            return
        self._require_host()
        command = sending_for(envelope.id)
        await self._outbox.put(item)
        if command is not None:
            self._unsent.sent(command, envelope.id, item)

    async def _send_through_stream(self, envelope: Envelope) -> None:
        """Queue ``envelope``, an ask that was handed over, for its shard's stream: the
        same command id and correlation (its command is applied at most once)."""
        item = self._prepare(envelope, hand_over=False)
        assert item is not None
        self._handover.failed_back += 1
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
        if item is None:
            return
        self._require_host()
        self._outbox.put_nowait(item)
        command = sending_for(envelope.id)
        if command is not None:
            self._unsent.sent(command, envelope.id, item)

    def resend_after(self) -> float:
        """Half a lease (0.1 s at least): an ask with no reply by then is sent again, unchanged (see
        ``Transport.resend_after``). A worker that dies after storing a command
        took its reply with it; the copy waits in the stream for the shard's next
        owner (within a lease), which answers it with the reply kept with the
        command's effect. A slow but live worker skips the copies (their command
        id is in flight or applied) and its own reply answers the ask."""
        return max(self.config.lease_ms / 2000, _MIN_RESEND)

    async def resend(self, envelope: Envelope) -> None:
        """Send ``envelope`` again, marked as a copy (``resent``): the shard's owner
        answers it with the reply kept with the command's effect, or skips it; it
        never handles it, so a command that was given up (dead-lettered, say) or
        kills its workers does not run again. The outbox drops it once its
        deadline passed. A command whose class says ``resend_as_new`` goes again as
        a new command instead (a new id, handled again; see :class:`Command`)."""
        self._asks_resent += 1
        if self._handover.holds(envelope.correlation):
            return  # handed over: its actor's handling answers it (see ``_handover``)
        if getattr(type(envelope.body), "resend_as_new", False):
            await self.send(msgspec.structs.replace(envelope, id=new_id()))
            return
        envelope.resent = True
        await self.send(envelope)

    async def take_due(self, kind: str, retry_after: float) -> list[str]:
        """The actors of ``kind`` due on the shards owned here (see
        ``Transport.take_due`` and :mod:`._due`).

        Raises:
            TransportError: Redis is away or failed.
        """
        if not self.worker:
            return []
        return await self._commits.due.take(kind, retry_after)

    async def flush(self) -> None:
        """Wait until every envelope queued so far is in Redis."""
        await self._outbox.flush()

    async def _outbox_loop(self, outbox: Outbox) -> None:
        while True:
            await outbox.wait_ready()
            await forever("outbox", outbox.write_all)

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
                    self.keys.broadcast(), {b"e": data}, maxlen=_BROADCAST_MAXLEN, approximate=True
                )

        await retrying(add, what="publish", retry_for=self.config.retry_for)

    async def reply(self, envelope: Envelope, reply: Reply) -> None:
        """XADD ``reply`` to the asker's reply stream (a lost reply times the ask out).

        A reply to an ask made through this same transport is handed over in
        memory: it would only travel to Redis and back into this process. A reply
        to a command whose changes wait for their group commit is sent after it.
        """
        await self._replies.reply(envelope, reply)

    # -- the runtime's hooks ---------------------------------------------------------------

    async def activated(self, address: str, actor: Actor) -> None:
        """Load a durable actor's state from Redis before its ``on_start``."""
        await self._commits.activated(address, actor)

    async def handled(self, envelope: Envelope, actor: Actor | None, ok: bool) -> bool:
        if isinstance(envelope, RedeliveredEnvelope):
            self._dead_letters.finished(envelope)
        stored = await self._commits.handled(envelope, actor, ok)
        if type(envelope) is HandedEnvelope and ok:
            await self._handed_handled(envelope, stored)
        return stored

    async def _handed_handled(self, envelope: HandedEnvelope, stored: bool) -> None:
        """Settle ``envelope``, a command handed over in memory and handled, whose
        effect was queued for its commit (or needed none) if ``stored``."""
        if envelope.correlation is None:
            if not stored or envelope.commit is None:
                # Not stored here (the shard was lost meanwhile, say), or nothing
                # to store; else done once its commit is (``_tell_settled``).
                self._tell_settled(envelope, stored)
        elif not stored:
            # Not stored here (the shard was lost meanwhile, say): no stream entry
            # stays pending for it, so it goes through the stream now.
            asked = self._handover.take_back(envelope.correlation)
            if asked is not None:
                await self._send_through_stream(asked)

    def batchable(self, envelope: Envelope) -> bool:
        """A command for a durable actor: an entry read new (not claimed after a
        failure: those are handled one at a time, each attempt counted), or one
        handed over in memory whose handler has not failed on it."""
        kind = type(envelope)
        if kind is HandedEnvelope:
            if cast(HandedEnvelope, envelope).failures:
                return False
        elif kind is not StreamEnvelope:
            return False
        record = self._held.actors.get(envelope.recipient)
        return record is not None and record.durable

    async def handled_batch(self, envelopes: list[Envelope], actor: Actor) -> bool | None:
        """Store a batch's effect (see ``GroupCommit.handled_batch``); the commands of
        it handed over in memory are settled as each would be on its own (see
        :meth:`handled`), in the order they were handled."""
        stored = await self._commits.handled_batch(envelopes, actor)
        if stored is not None:
            for envelope in envelopes:
                if type(envelope) is HandedEnvelope:
                    await self._handed_handled(envelope, stored)
        return stored

    def again(self, envelope: Envelope) -> None:
        self._unsent.failed(envelope)

    async def starting(self, envelope: Envelope) -> None:
        await self._dead_letters.starting(envelope)

    async def retry(self, envelope: Envelope, allowed: bool) -> bool:
        again = await self._intake.retry(envelope, allowed)
        if not again:
            self._dead_lettered(envelope)
        return again

    async def undeliverable(self, envelope: Envelope, error: ActorError) -> None:
        await self._intake.undeliverable(envelope, error)
        self._dead_lettered(envelope)

    def _dead_lettered(self, envelope: Envelope) -> None:
        """``envelope`` is given up; a tell handed over that was dead-lettered here is
        done (one whose shard went is sent through the stream by ``Owner.release``)."""
        if type(envelope) is HandedEnvelope and envelope.correlation is None:
            shard = self._held.shards.get(envelope.shard)
            if shard is not None and shard.lease == envelope.lease:
                self._handover.stored_tell(envelope.id)

    def dropped(self, envelope: Envelope) -> None:
        self._held.dropped(envelope)
        if type(envelope) is HandedEnvelope and envelope.correlation is None:
            # Never handled, and no stream entry stays pending for it.
            self._tell_settled(envelope, False)

    def instrument(self, metrics: Metrics) -> None:
        """Record each group commit, and add the transport's families (see
        :func:`~actormem.runtime.redis._metrics.families`)."""
        from actormem.runtime.redis._metrics import families  # only with metrics on

        self._commits.metrics = metrics
        metrics.add(functools.partial(families, self))

    # -- inspection -------------------------------------------------------------------------

    def settled(self) -> bool:
        """True when every command read here was handled and its changes stored
        (entries of effect-free commands may still wait for their batched XACK)."""
        return self._held.settled()

    def owned_shards(self) -> list[int]:
        """The shards this worker owns now."""
        return sorted(self._held.shards)

    def stats(self) -> RedisTransportStats:
        """Return a snapshot of the counters (cheap enough to poll)."""
        leases = self._owner.leases
        return RedisTransportStats(
            worker=self.id,
            owned_shards=self.owned_shards(),
            actors=len(self._held.actors),
            outbox=len(self._outbox),
            expired_unsent=self._outbox.expired + self._replies.outbox.expired,
            pending_asks=self._replies.pending,
            redelivered=self._intake.redelivered,
            duplicates=self._intake.duplicates,
            dead_lettered=self._dead_letters.written,
            asks_resent=self._asks_resent,
            answered_again=self._intake.answered_again,
            leases_acquired=leases.acquired if leases is not None else 0,
            leases_lost=leases.lost if leases is not None else 0,
            handed_over=self._handover.handed_over,
            failed_back=self._handover.failed_back,
            tells_handed_over=self._handover.tells_handed_over,
            tells_failed_back=self._handover.tells_failed_back,
        )
