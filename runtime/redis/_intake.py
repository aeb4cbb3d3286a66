"""Intake: the owner's side of a shard stream, from Redis to the actors' mailboxes.

A worker reads each shard it owns through the consumer group ``workers``, first
claiming what earlier owners left pending (XPENDING, XCLAIM), then new entries
(XREADGROUP: one blocking read over all its shards, ``_shared_read``, or on a Redis
Cluster one per shard). Each entry is checked (size, codec, address, shard), deduplicated by
command id against what its actor applied or has in flight (an ask applied already
is answered with the reply kept with its commit), and delivered; what cannot be
(for a reason of the entry's own: the runtime refuses it too when no actor can
take it) goes to the dead letters, its asker is answered, and the shard is served
on. The stream is trimmed, never past a pending entry.
Broadcasts are fanned out to the local actors of their kind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
import redis.exceptions as rexc
import structlog

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import (
    ActorError,
    InvalidAddressError,
    MailboxFullError,
    MessageDecodeError,
    TransportError,
)
from actormem.runtime.ids import split_address
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis._dead_letters import given_up
from actormem.runtime.redis._loops import entry_field, streams_read, trim_settled, wait_open
from actormem.runtime.redis._retry import forever
from actormem.runtime.redis._shards import ActorRecord, RedeliveredEnvelope, StreamEnvelope
from actormem.runtime.redis._shared_read import SharedRead
from actormem.runtime.redis._wire import wire
from actormem.runtime.redis.keys import CONSUMER_GROUP, shard_of

if TYPE_CHECKING:
    from actormem.runtime.redis._commits import GroupCommit
    from actormem.runtime.redis._dead_letters import DeadLetters
    from actormem.runtime.redis._handover import Handover
    from actormem.runtime.redis._replies import Replies
    from actormem.runtime.redis._shards import Holdings, Link, Shard
    from actormem.runtime.redis._unsent import Unsent
    from actormem.runtime.transports.base import TransportHost

__all__ = ("Intake",)

log = structlog.get_logger("actormem.redis")

#: Entries read per XREADGROUP / XPENDING page.
BATCH: Final = 256


class Intake:
    """Reads the owned shards and delivers their entries, each command once.

    Args:
        link: the transport, whose id is its consumer's name in the group.
        held: the shards and actors this worker holds.
        commits: stores and acks what was handled.
        dead_letters: takes the entries given up on.
        replies: answers the asks that fail here.
        unsent: sends again what earlier owners' commits kept unsent.
        lease_fresh: whether this worker's lease on a shard was recently renewed.
    """

    def __init__(
        self,
        link: Link,
        *,
        held: Holdings,
        commits: GroupCommit,
        dead_letters: DeadLetters,
        replies: Replies,
        unsent: Unsent,
        lease_fresh: Callable[[int], bool],
    ) -> None:
        self._link = link
        self._config = link.config
        self._keys = link.keys
        self._codec = link.codec
        self._id = link.id
        self._held = held
        self._commits = commits
        self._dead_letters = dead_letters
        self._replies = replies
        self._unsent = unsent
        self._lease_fresh = lease_fresh
        #: Entries delivered again (after a failure or a worker's death).
        self.redelivered = 0
        #: Commands skipped because their id was already applied.
        self.duplicates = 0
        #: Of those, asks answered again with the reply their commit kept.
        self.answered_again = 0
        #: Told what each read delivered (see ``Handover.read``), if set.
        self.handover: Handover | None = None
        #: The one read over every shard owned, once :meth:`share_reads` started it.
        self.shared = SharedRead(
            link,
            held=held,
            commits=commits,
            handle=self.handle,
            claim=self.claim,
            ensure_group=_ensure_group,
            lease_fresh=lease_fresh,
            replies_queued=lambda: bool(replies.outbox),
            batch=BATCH,
        )
        self._sharing = False

    def share_reads(self, host: TransportHost) -> None:
        """Read the owned shards with one blocking read (see ``_shared_read``), not one
        each: start its reader in ``host``'s task group. Not on a Redis Cluster, whose
        shards' streams are in different slots."""
        self._sharing = True
        host.spawn(self.shared.run)

    async def consume(self, shard: Shard) -> None:
        """Serve ``shard`` until cancelled: send again the tells earlier owners stored
        unsent, claim what they left pending, then read (in the shared read, or on its
        own: see :meth:`share_reads`)."""
        stream = self._keys.stream(shard.number)
        client: Any = self._link.client
        await forever("create_group", lambda: _ensure_group(client, stream))
        await wait_open(self._link)
        await forever("resend_unsent", lambda: self._unsent.resend(shard))
        await forever("recover", lambda: self._recover(shard, 0))
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._commits.run, shard)
            tg.start_soon(self._unsent.run, shard)
            if self._sharing:
                await self.shared.serve(shard)
            else:
                await self._read_loop(shard, stream)

    def leave(self, shards: list[Shard]) -> None:
        """Stop reading ``shards`` (lost or given back), and handling what was read of
        them, at once."""
        for shard in shards:
            self.shared.leave(shard)

    async def left(self, shards: list[Shard]) -> None:
        """Return once no read in flight holds the streams of ``shards``, which
        :meth:`leave` stopped reading: until then it may still take entries of them."""
        await self.shared.left(shards)

    async def _read_loop(self, shard: Shard, stream: str) -> None:
        """Read ``shard`` on its own (on a Redis Cluster), until cancelled."""
        config = self._config
        client: Any = self._link.client
        # One blocking read per shard at a time: the twin's pool holds one for each.
        reads = wire(self._link.blocking_client, config.shards)
        command = (
            *("XREADGROUP", "GROUP", CONSUMER_GROUP, self._id, "COUNT", BATCH),
            *("BLOCK", config.block_ms, "STREAMS", stream, ">"),
        )
        host = self._link.host
        held = self._held
        claim_every = config.claim_idle_ms / 2000
        next_claim = time.monotonic() + claim_every

        async def read() -> Any:
            try:
                with redis_errors(f"XREADGROUP {stream}"):
                    return await reads.execute_command(*command)
            except TransportError as exc:
                cause = exc.__cause__
                if isinstance(cause, rexc.ResponseError) and "NOGROUP" in str(cause):
                    # The stream was lost (a restart without AOF): start it again.
                    await _ensure_group(client, stream)
                    return None
                raise

        while True:
            if not host.is_open:
                await anyio.sleep_forever()  # shutting down: read nothing new
            if not self._lease_fresh(shard.number):
                # Not renewed for most of a lease: another worker may own the shard
                # by now, so read nothing until the heartbeat settles it.
                await anyio.sleep(config.block_ms / 1000)
                continue
            response = await forever("read", read)
            if not held.current(shard):
                return  # lost while reading: what was read stays pending for its holder
            for entries in streams_read(response):
                await self.handle(shard, entries)
            if not response and self.handover is not None:
                self.handover.read(shard, [], True)  # the read waited: nothing was left
            await forever("ack", lambda: self._commits.flush_acks(shard))
            if time.monotonic() >= next_claim:
                next_claim = time.monotonic() + claim_every
                await self.claim(shard)

    async def handle(self, shard: Shard, entries: Any) -> None:
        """Check, deduplicate and deliver the ``entries`` one read of ``shard`` brought
        (as the server sent them), in order, and tell the hand-over what was read."""
        # Each entry decoded once: its recipient's record is loaded from it too.
        batch = [self._decode(shard, entry_id.decode(), fields) for entry_id, fields in entries]
        if self._link.trace is not None:
            self._link.trace.read(batch)
        await self._load_records(shard, batch)
        held = self._held
        shards, actors, number = held.shards, held.actors, shard.number
        deliver_nowait = self._link.host.deliver_nowait
        inflight, now = shard.inflight, time.monotonic()
        for entry, data, env in batch:
            # The usual entry, checked here without a call of its own: a command new
            # to an actor whose record this worker holds, into a mailbox with room.
            if type(env) is StreamEnvelope and shards.get(number) is shard:
                record = actors.get(env.recipient)
                if (
                    record is not None
                    and record.shard == number
                    and not (
                        env.id
                        and (env.resent or env.id in record.applied or env.id in record.inflight)
                    )
                ):
                    # self._taken(shard, entry, env, record), inline (the time of the read).
                    inflight.add(entry)
                    if env.id:
                        record.inflight.add(env.id)
                    record.busy += 1
                    record.last_used = now
                    try:
                        deliver_nowait(env)
                    except ActorError as exc:
                        await self._not_delivered(shard, entry, cast(bytes, data), env, exc)
                    continue
            await self._accept(shard, entry, data, env)
        if self.handover is not None:
            self.handover.read(shard, batch, len(batch) < BATCH)

    async def claim(self, shard: Shard) -> None:
        """Claim what stayed pending on ``shard`` for ``claim_idle_ms`` (a worker died
        with it, or a delivery failed), and trim its stream."""
        await forever("recover", lambda: self._recover(shard, self._config.claim_idle_ms))
        await forever("trim", lambda: self._trim(shard))

    async def _recover(self, shard: Shard, min_idle: int) -> None:
        """Claim entries pending for ``min_idle`` ms (any consumer), or dead-letter them."""
        stream = self._keys.stream(shard.number)
        client: Any = self._link.client
        dead_letters = self._dead_letters
        start = "-"
        while True:
            with redis_errors(f"XPENDING {stream}"):
                page = await client.xpending_range(
                    stream, CONSUMER_GROUP, min=start, max="+", count=BATCH, idle=min_idle or None
                )
            for item in page:
                if not self._held.current(shard):
                    return  # lost meanwhile: its holder claims what is pending
                entry = item["message_id"].decode()
                if entry in shard.inflight or entry in shard.acks:
                    continue
                reason = await dead_letters.poisoned(shard, entry, item["times_delivered"])
                if reason is not None:
                    with redis_errors(f"XRANGE {stream}"):
                        found = await client.xrange(stream, entry, entry)
                    data = found[0][1].get(b"e") if found and found[0][1] else None
                    await dead_letters.write(shard, entry, data, reason)
                    if data is not None:
                        # An ask whose every delivery died with its worker got no answer.
                        await dead_letters.answer_asker(data, partial(given_up, reason=reason))
                    continue
                with redis_errors(f"XCLAIM {stream}"):
                    claimed = await client.xclaim(
                        stream,
                        CONSUMER_GROUP,
                        self._id,
                        min_idle_time=min_idle,
                        message_ids=[entry],
                    )
                self.redelivered += len(claimed)
                if claimed and item["consumer"].decode() != self._id:
                    log.info(
                        "entry_taken_over",
                        shard=shard.number,
                        entry=entry,
                        previous=item["consumer"].decode(),
                        deliveries=item["times_delivered"] + 1,
                    )
                for entry_id, fields in claimed:
                    if fields is None:  # trimmed meanwhile: nothing left to do
                        await self._commits.ack(shard, [entry])
                    else:
                        read = self._decode(shard, entry_id.decode(), fields, redelivered=True)
                        await self._accept(shard, *read)
                        if self.handover is not None:
                            # As a read's entries: what this worker sent is not in transit
                            # any more, and the tells of the asks handed over next go after
                            # this entry's.
                            self.handover.read(shard, [read], False)
            if len(page) < BATCH:
                return
            start = "(" + page[-1]["message_id"].decode()

    async def _trim(self, shard: Shard) -> None:
        """Trim the stream past ``stream_maxlen``, but never at or above a pending entry."""
        stream = self._keys.stream(shard.number)
        client: Any = self._link.client
        with redis_errors(f"trimming {stream}"):
            if await client.xlen(stream) <= self._config.stream_maxlen:
                return
            bound = await trim_settled(client, stream)
        if bound is not None:
            log.debug("stream_trimmed", stream=stream, below=f"{bound[0]}-{bound[1]}")

    def _decode(
        self, shard: Shard, entry: str, fields: Any, redelivered: bool = False
    ) -> tuple[str, bytes | None, Envelope | MessageDecodeError | None]:
        """``entry``, its data (its ``e`` field) and its envelope decoded (an
        error when it does not decode; None when there is no data, or too much):
        ``redelivered``: claimed from the pending list, not read new."""
        data = entry_field(fields, b"e")
        if data is None or len(data) > self._config.max_message_bytes:
            return entry, data, None
        kind = RedeliveredEnvelope if redelivered else StreamEnvelope
        try:
            env = self._codec.decode_envelope(
                data, kind, shard=shard.number, entry=entry, lease=shard.lease
            )
        except MessageDecodeError as exc:
            return entry, data, exc
        return entry, data, env

    async def _accept(
        self,
        shard: Shard,
        entry: str,
        data: bytes | None,
        decoded: Envelope | MessageDecodeError | None,
    ) -> None:
        """Check, deduplicate and deliver one stream entry, as :meth:`_decode` read it."""
        config, dead_letters, held = self._config, self._dead_letters, self._held
        if not held.current(shard):
            return  # lost meanwhile: the entry stays pending for the shard's holder
        if data is None:
            await dead_letters.write(shard, entry, None, "the entry has no 'e' field")
            return
        if decoded is None:
            reason = (
                f"the entry is {len(data)} bytes, over max_message_bytes={config.max_message_bytes}"
            )
            await dead_letters.write(shard, entry, data, reason)
            return
        if isinstance(decoded, MessageDecodeError):
            await self._undecodable(shard, entry, data, decoded)
            return
        env = decoded
        record = held.actors.get(env.recipient)
        if record is None or record.shard != shard.number:
            # A held record's address was checked when it was made (a record is made
            # only for a valid address of its shard): only a new one is checked here.
            try:
                split_address(env.recipient)
            except InvalidAddressError as exc:
                await self._refuse(shard, entry, data, cast(StreamEnvelope, env), exc)
                return
            expected = shard_of(env.recipient, config.shards)
            if expected != shard.number:
                reason = (
                    f"{env.recipient} belongs to shard {expected}, not {shard.number} "
                    "(do all workers and clients use the same 'shards'?)"
                )
                await dead_letters.write(shard, entry, data, reason)
                return
            record = await self._record(env.recipient, shard)
            if not held.current(shard):
                return  # lost while the record loaded
        if env.id and (env.resent or env.id in record.applied or env.id in record.inflight):
            await self._duplicate(shard, entry, env, record)
            return
        delivery = cast(StreamEnvelope, env)
        self._taken(shard, entry, delivery, record)
        try:
            self._link.host.deliver_nowait(delivery)
        except ActorError as exc:
            await self._not_delivered(shard, entry, data, delivery, exc)

    @staticmethod
    def _taken(shard: Shard, entry: str, env: StreamEnvelope, record: ActorRecord) -> None:
        """Note ``env`` (read as ``entry``) in flight, for its actor's ``record``."""
        shard.inflight.add(entry)
        if env.id:
            record.inflight.add(env.id)
        record.busy += 1
        record.last_used = time.monotonic()

    async def _not_delivered(
        self, shard: Shard, entry: str, data: bytes, delivery: StreamEnvelope, error: ActorError
    ) -> None:
        """``delivery`` did not go into its mailbox at once (``error``): wait for room
        in a full mailbox; refuse it when no actor can take it (unknown kind, stopped...)."""
        if isinstance(error, MailboxFullError):
            try:
                await self._link.host.deliver(delivery)
            except ActorError as exc:
                error = exc
            else:
                return
        self._held.dropped(delivery)
        await self._refuse(shard, entry, data, delivery, error)

    async def _undecodable(
        self, shard: Shard, entry: str, data: bytes, error: MessageDecodeError
    ) -> None:
        """Skip, refuse or dead-letter an entry whose envelope does not decode."""
        dead_letters = self._dead_letters
        copied = self._codec.copy_of(data)
        if copied is not None:
            # A copy of an ask sent again while its reply was slow: its first
            # copy was refused or dead-lettered, and its asker answered, already.
            self.duplicates += 1
            await self._commits.ack(shard, [entry])
            actor = self._codec.recipient(data)
            log.info("duplicate_skipped", actor=actor, msg_id=copied, entry=entry)
            return
        refusal = self._codec.refusal(data)
        if refusal is not None and self._codec.reply_address(data) is not None:
            # Bad input in a well-formed ask: the asker's mistake, answered like
            # any refused command, not a dead letter.
            await dead_letters.answer_asker(data, lambda _: refusal)
            await self._commits.ack(shard, [entry])
            log.info("command_refused", shard=shard.number, entry=entry, reason=str(refusal))
            return
        await dead_letters.write(shard, entry, data, str(error))
        await dead_letters.answer_asker(data, lambda _: error)

    async def _refuse(
        self, shard: Shard, entry: str, data: bytes, env: StreamEnvelope, error: ActorError
    ) -> None:
        """Dead-letter an entry no actor here can take, and answer its asker."""
        await self._dead_letters.write(shard, entry, data, str(error))
        if env.correlation is not None:
            await self._replies.reply(env, Reply(env.correlation, error=error))

    async def undeliverable(self, env: Envelope, error: ActorError) -> None:
        """The runtime refused a delivered entry (see ``Transport.undeliverable``):
        dead-letter it, unless the shard is no longer ours (then it stays pending
        for the next owner, which decides again)."""
        self._held.dropped(env)
        if not isinstance(env, StreamEnvelope):
            return
        shard = self._held.shards.get(env.shard)
        if shard is not None and shard.lease == env.lease:
            self._giving_up(env)
            await self._dead_letters.write_handled(shard, env, str(error))

    def _giving_up(self, env: StreamEnvelope) -> None:
        """``env`` is given up, and its asker is told so: an ask handed over in memory
        (no entry) is forgotten by the hand-over at once, so that no copy of it goes
        through the stream to be handled after that (see ``_handover``)."""
        if not env.entry and env.correlation is not None and self.handover is not None:
            self.handover.giving_up(env.correlation, env.deadline)

    async def _duplicate(
        self, shard: Shard, entry: str, env: Envelope, record: ActorRecord
    ) -> None:
        """Skip ``env``, a command this actor applied or is handling, or a copy of
        an ask (sent again because no reply came; its first copy came ahead of it):
        ack it, and answer an ask already applied with the reply its commit kept
        (say its worker died before the first reply went out). An ask still in
        flight is answered when it is done: its copy carries the same correlation.
        A copy is never handled: its command was applied, is in flight, or was
        given up (dead-lettered, shed, refused) and its asker told so."""
        self.duplicates += 1
        try:
            answered = env.id not in record.inflight and await self._replies.answer_again(
                env, self._keys.reply(shard.number, env.recipient, env.id)
            )
        except TransportError as exc:
            # Left pending: claimed again after claim_idle_ms, and answered then.
            log.warning("kept_reply_unread", actor=env.recipient, msg_id=env.id, reason=str(exc))
            return
        log.info(
            "duplicate_skipped", actor=env.recipient, msg_id=env.id, entry=entry, answered=answered
        )
        if answered:
            self.answered_again += 1
        shard.acks.append(entry)  # acked with the read's batch

    async def _record(self, address: str, shard: Shard) -> ActorRecord:
        """The record of the actor at ``address``, its applied ids loaded from Redis
        (kept only while ``shard`` is still held)."""
        held = self._held
        record = held.actors.get(address)
        if record is None:
            key = self._keys.actor_applied(shard.number, address)
            with redis_errors(f"loading the applied ids of {address}"):
                ids: list[bytes] = await self._link.client.zrange(key, 0, -1)  # type: ignore[assignment]
            record = held.actors.get(address)  # another task may have loaded it meanwhile
            if record is None:
                record = ActorRecord(shard.number, [i.decode() for i in ids])
                if held.current(shard):
                    held.actors[address] = record
        return record

    async def _load_records(self, shard: Shard, read: list[tuple[str, bytes | None, Any]]) -> None:
        """Load, in one round trip, the records of the actors the entries ``read``
        (see :meth:`_decode`) are for that this worker does not hold, with their
        stored state for their activation: instead of two round trips for each, one
        actor at a time. An entry that did not decode is left to :meth:`_accept`,
        and so is everything when Redis fails here."""
        actors, shards = self._held.actors, self._config.shards
        wanted: dict[str, None] = {}
        for _, _, env in read:
            if not isinstance(env, Envelope):
                continue
            address = env.recipient
            if address in actors or address in wanted:
                continue
            try:
                split_address(address)
            except InvalidAddressError:
                continue
            if shard_of(address, shards) == shard.number:
                wanted[address] = None
        if not wanted:
            return
        keys, number, lease = self._keys, shard.number, shard.lease
        try:
            with redis_errors("loading the records of the actors read"):
                async with self._link.client.pipeline(transaction=False) as pipe:
                    for address in wanted:
                        pipe.zrange(keys.actor_applied(number, address), 0, -1)
                        pipe.get(keys.actor_snapshot(number, address))
                        pipe.lrange(keys.actor_log(number, address), 0, -1)
                    loaded = await pipe.execute()
        except TransportError:
            return  # each is loaded on its own as it is accepted
        if not self._held.current(shard):
            return  # lost meanwhile: its holder loads them
        for i, address in enumerate(wanted):
            if address not in actors:  # another task may have loaded it meanwhile
                ids, snapshot, log_entries = loaded[3 * i : 3 * i + 3]
                record = actors[address] = ActorRecord(number, [x.decode() for x in ids])
                record.loaded = (lease, snapshot, log_entries)

    async def retry(self, env: Envelope, allowed: bool) -> bool:
        """After a handler failed: deliver ``env`` again at once (so its actor's later
        commands wait), or, after ``max_deliveries`` failures or when the actor's
        restart budget is spent, dead-letter it (so they do not wait for ever)."""
        if not isinstance(env, StreamEnvelope):
            return False
        shard = self._held.shards.get(env.shard)
        if shard is None or shard.lease != env.lease:
            return False  # no longer ours: it stays pending for the shard's new owner
        env.failures += 1
        limit = self._config.max_deliveries
        if allowed and env.failures < limit:
            # In flight again (handled() let go of it): not claimed, not duplicated.
            if env.entry:  # a command handed over in memory has no entry
                shard.inflight.add(env.entry)
            record = self._held.actors.get(env.recipient)
            if record is not None:
                if env.id:
                    record.inflight.add(env.id)
                record.busy += 1
            self.redelivered += 1
            return True
        self._giving_up(env)
        reason = (
            f"the handler failed {env.failures} times in a row"
            + ("" if allowed else " (the actor's restart budget is spent)")
            + f" (max_deliveries={limit})"
        )
        await self._dead_letters.write_handled(shard, env, reason)
        return False

    async def fan_out(self, data: bytes | None) -> None:
        """Deliver a broadcast to every active local actor of its kind."""
        host = self._link.host
        if data is None or len(data) > self._config.max_message_bytes:
            log.warning("broadcast_dropped", reason="missing or too large")
            return
        try:
            envelope = self._codec.decode_envelope(data)
        except MessageDecodeError as exc:
            log.warning("broadcast_undecodable", reason=str(exc))
            return
        try:
            kind, _ = split_address(envelope.recipient)  # "kind/*"
        except InvalidAddressError as exc:
            log.warning("broadcast_undeliverable", reason=str(exc))
            return
        for address in host.local_addresses(kind):
            copy = Envelope(recipient=address, body=envelope.body, id=envelope.id)
            try:
                await host.deliver(copy)
            except ActorError as exc:
                log.warning("broadcast_undelivered", to=address, reason=str(exc))


async def _ensure_group(client: Any, stream: str) -> None:
    try:
        with redis_errors(f"XGROUP CREATE {stream}"):
            await client.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
    except TransportError as exc:
        if not str(exc.__cause__).startswith("BUSYGROUP"):
            raise
