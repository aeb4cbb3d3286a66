"""The owner's side of a shard: read, deduplicate, deliver, load, store and ack.

Functions here work on a :class:`~runtime.transports.redis.RedisTransport`'s
state; they live apart so the transport module stays one idea (sending and
lifetimes) and this one another (consuming a shard).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
import redis.exceptions as rexc
import structlog

from runtime._envelope import Envelope, Reply
from runtime.errors import ActorError, HandlerError, MessageDecodeError, TransportError
from runtime.redis._client import redis_errors, retrying
from runtime.redis.durable import Durable, DurableChanges, is_durable
from runtime.redis.keys import CONSUMER_GROUP, shard_of

if TYPE_CHECKING:
    from runtime._actor import Actor
    from runtime.transports.redis import RedisTransport

__all__ = (
    "Agent",
    "Shard",
    "StreamEnvelope",
    "activated",
    "consume",
    "fan_out",
    "flush_acks",
    "handled",
)

log = structlog.get_logger("actormem.redis")

#: Entries read per XREADGROUP / XPENDING page.
BATCH: Final = 64
#: Entries kept in the dead-letter stream, approximately.
_DLQ_MAXLEN: Final = 100_000


class StreamEnvelope(Envelope, kw_only=True):
    """An envelope read from a shard stream: where to XACK it, under which lease."""

    shard: int = -1
    entry: str = ""
    lease: str = ""


class Shard:
    """A shard this worker owns: its lease value and the entries it has in flight."""

    __slots__ = ("acks", "inflight", "lease", "number", "scope")

    def __init__(self, number: int, lease: str) -> None:
        self.number = number
        self.lease = lease
        self.scope = anyio.CancelScope()
        self.inflight: set[str] = set()
        # Handled entries of non-durable actors, acked in one call per batch.
        self.acks: list[str] = []


class Agent:
    """What this worker remembers of one actor it serves: applied command ids."""

    __slots__ = ("applied", "busy", "durable", "inflight", "last_used", "lease", "order", "shard")

    def __init__(self, shard: int, applied: list[str]) -> None:
        self.shard = shard
        # The shard lease the actor was activated under ('' = not activated).
        self.lease = ""
        self.applied = set(applied)
        self.order: deque[str] = deque(applied)
        self.inflight: set[str] = set()
        self.busy = 0
        self.durable = False
        self.last_used = time.monotonic()

    def remember(self, command: str, keep: int) -> None:
        """Record ``command`` as applied, forgetting the oldest beyond ``keep``."""
        self.applied.add(command)
        self.order.append(command)
        while len(self.order) > keep:
            self.applied.discard(self.order.popleft())


# -- reading ----------------------------------------------------------------------------


async def consume(t: RedisTransport, shard: Shard) -> None:
    """Serve ``shard`` until cancelled: claim what earlier owners left, then read."""
    stream = t.keys.stream(shard.number)
    client: Any = t.client
    blocking: Any = t.blocking_client
    await t.forever("create_group", lambda: _ensure_group(client, stream))
    await t.wait_host_open()
    host = t.host
    await t.forever("recover", lambda: _recover(t, shard, 0))
    claim_every = t.config.claim_idle_ms / 2000
    next_claim = time.monotonic() + claim_every

    async def read() -> Any:
        try:
            with redis_errors(f"XREADGROUP {stream}"):
                return await blocking.xreadgroup(
                    CONSUMER_GROUP, t.id, {stream: ">"}, count=BATCH, block=t.config.block_ms
                )
        except TransportError as exc:
            if isinstance(exc.__cause__, rexc.ResponseError) and "NOGROUP" in str(exc.__cause__):
                # The stream was lost (a restart without AOF): start it again.
                await _ensure_group(client, stream)
                return None
            raise

    while True:
        if not host.is_open:
            await anyio.sleep_forever()  # shutting down: read nothing new
        if not t.lease_fresh(shard.number):
            # Not renewed for most of a lease: another worker may own the shard
            # by now, so read nothing until the heartbeat settles it.
            await anyio.sleep(t.config.block_ms / 1000)
            continue
        response = await t.forever("read", read)
        for _stream, entries in response or ():
            for entry_id, fields in entries:
                await _accept(t, shard, entry_id.decode(), fields)
        await t.forever("ack", lambda: flush_acks(t, shard))
        if time.monotonic() >= next_claim:
            next_claim = time.monotonic() + claim_every
            await t.forever("recover", lambda: _recover(t, shard, t.config.claim_idle_ms))
            await t.forever("trim", lambda: _trim(t, shard))


async def _ensure_group(client: Any, stream: str) -> None:
    try:
        with redis_errors(f"XGROUP CREATE {stream}"):
            await client.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
    except TransportError as exc:
        if not str(exc.__cause__).startswith("BUSYGROUP"):
            raise


async def _recover(t: RedisTransport, shard: Shard, min_idle: int) -> None:
    """Claim entries pending for ``min_idle`` ms (any consumer), or dead-letter them."""
    stream = t.keys.stream(shard.number)
    client: Any = t.client
    start = "-"
    while True:
        with redis_errors(f"XPENDING {stream}"):
            page = await client.xpending_range(
                stream, CONSUMER_GROUP, min=start, max="+", count=BATCH, idle=min_idle or None
            )
        for item in page:
            entry = item["message_id"].decode()
            if entry in shard.inflight or entry in shard.acks:
                continue
            if item["times_delivered"] >= t.config.max_deliveries:
                with redis_errors(f"XRANGE {stream}"):
                    found = await client.xrange(stream, entry, entry)
                data = found[0][1].get(b"e") if found and found[0][1] else None
                reason = (
                    f"delivered {item['times_delivered']} times without being handled "
                    f"(max_deliveries={t.config.max_deliveries})"
                )
                await _dead_letter(t, shard, entry, data, reason)
                if data is not None:
                    # An ask whose every delivery died with its worker got no answer.
                    await _answer_asker(t, data, partial(_given_up, reason=reason))
                continue
            with redis_errors(f"XCLAIM {stream}"):
                claimed = await client.xclaim(
                    stream, CONSUMER_GROUP, t.id, min_idle_time=min_idle, message_ids=[entry]
                )
            t.redelivered += len(claimed)
            if claimed and item["consumer"].decode() != t.id:
                log.info(
                    "entry_taken_over",
                    shard=shard.number,
                    entry=entry,
                    previous=item["consumer"].decode(),
                    deliveries=item["times_delivered"] + 1,
                )
            for entry_id, fields in claimed:
                if fields is None:  # trimmed meanwhile: nothing left to do
                    await _ack(t, shard, [entry])
                else:
                    await _accept(t, shard, entry_id.decode(), fields)
        if len(page) < BATCH:
            return
        start = "(" + page[-1]["message_id"].decode()


async def _trim(t: RedisTransport, shard: Shard) -> None:
    """Trim the stream past ``stream_maxlen``, but never at or above a pending entry."""
    stream = t.keys.stream(shard.number)
    client: Any = t.client
    with redis_errors(f"trimming {stream}"):
        if await client.xlen(stream) <= t.config.stream_maxlen:
            return
        summary = await client.xpending(stream, CONSUMER_GROUP)
        if summary["pending"]:
            minid = summary["min"].decode()
        else:
            groups = await client.xinfo_groups(stream)
            last = next(
                (g["last-delivered-id"] for g in groups if g["name"] == CONSUMER_GROUP.encode()),
                None,
            )
            if last is None:
                return
            ms, _, seq = last.decode().partition("-")
            minid = f"{ms}-{int(seq) + 1}"
        # Exact: approximate trimming only drops whole radix-tree nodes (~100 entries).
        removed = await client.xtrim(stream, minid=minid, approximate=False)
    if removed:
        log.debug("stream_trimmed", stream=stream, removed=removed, below=minid)


async def _accept(t: RedisTransport, shard: Shard, entry: str, fields: dict[bytes, bytes]) -> None:
    """Check, deduplicate and deliver one stream entry."""
    data = fields.get(b"e")
    if data is None:
        await _dead_letter(t, shard, entry, None, "the entry has no 'e' field")
        return
    if len(data) > t.config.max_message_bytes:
        reason = (
            f"the entry is {len(data)} bytes, over max_message_bytes={t.config.max_message_bytes}"
        )
        await _dead_letter(t, shard, entry, data, reason)
        return
    try:
        env = t.codec.decode_envelope(data)
    except MessageDecodeError as exc:
        await _dead_letter(t, shard, entry, data, str(exc))
        error = exc
        await _answer_asker(t, data, lambda _: error)
        return
    expected = shard_of(env.recipient, t.config.shards)
    if expected != shard.number:
        reason = (
            f"{env.recipient} belongs to shard {expected}, not {shard.number} "
            "(do all workers and clients use the same 'shards'?)"
        )
        await _dead_letter(t, shard, entry, data, reason)
        return
    agent = await _agent(t, env.recipient, shard.number)
    if env.id and (env.id in agent.applied or env.id in agent.inflight):
        t.duplicates += 1
        log.info("duplicate_skipped", actor=env.recipient, msg_id=env.id, entry=entry)
        await _ack(t, shard, [entry])
        return
    delivery = StreamEnvelope(
        recipient=env.recipient,
        body=env.body,
        id=env.id,
        sender=env.sender,
        reply_to=env.reply_to,
        correlation=env.correlation,
        deadline=env.deadline,
        shard=shard.number,
        entry=entry,
        lease=shard.lease,
    )
    shard.inflight.add(entry)
    if env.id:
        agent.inflight.add(env.id)
    agent.busy += 1
    agent.last_used = time.monotonic()
    try:
        await t.host.deliver(delivery)
    except ActorError as exc:
        t.dropped(delivery)
        await _dead_letter(t, shard, entry, data, str(exc))
        if delivery.correlation is not None:
            await t.reply(delivery, Reply(delivery.correlation, error=exc))


def _given_up(address: str, *, reason: str) -> BaseException:
    return HandlerError(address, reason)


async def _answer_asker(
    t: RedisTransport, data: bytes, error_for: Callable[[str], BaseException]
) -> None:
    """If ``data`` is an ask that will never be handled, fail it now, not at its timeout.

    Args:
        error_for: makes the error from the address that was asked.
    """
    asker = t.codec.reply_address(data)
    if asker is not None:
        reply_to, correlation, recipient = asker
        bounce = Envelope(recipient=recipient, body=None, reply_to=reply_to)
        await t.reply(bounce, Reply(correlation, error=error_for(recipient)))


async def _agent(t: RedisTransport, address: str, shard: int) -> Agent:
    agent = t.agents.get(address)
    if agent is None:
        key = t.keys.agent_applied(shard, address)
        with redis_errors(f"loading the applied ids of {address}"):
            ids: list[bytes] = await t.client.zrange(key, 0, -1)  # type: ignore[assignment]
        agent = t.agents.get(address)  # another task may have loaded it meanwhile
        if agent is None:
            agent = t.agents[address] = Agent(shard, [i.decode() for i in ids])
    return agent


async def _dead_letter(
    t: RedisTransport, shard: Shard, entry: str, data: bytes | None, reason: str
) -> None:
    stream = t.keys.stream(shard.number)
    fields: dict[Any, Any] = {
        b"reason": reason,
        b"stream": stream,
        b"entry": entry,
        b"worker": t.id,
    }
    if data is not None:
        fields[b"e"] = data
    with redis_errors("XADD to the dead letters"):
        await t.client.xadd(t.keys.dead_letters(), fields, maxlen=_DLQ_MAXLEN, approximate=True)
    await _ack(t, shard, [entry])
    t.dead_lettered += 1
    log.warning("dead_lettered", stream=stream, entry=entry, reason=reason)


async def _ack(t: RedisTransport, shard: Shard, entries: list[str]) -> None:
    with redis_errors("XACK"):
        result = await t.script("ack")(
            keys=[t.keys.lease(shard.number), t.keys.stream(shard.number)],
            args=[shard.lease, CONSUMER_GROUP, *entries],
        )
    if result == -1:
        log.warning("ack_fenced_off", shard=shard.number, entries=len(entries))


# -- broadcasts and activations ------------------------------------------------------


async def fan_out(t: RedisTransport, data: bytes | None) -> None:
    """Deliver a broadcast to every active local actor of its kind."""
    host = t.host
    if data is None or len(data) > t.config.max_message_bytes:
        log.warning("broadcast_dropped", reason="missing or too large")
        return
    try:
        envelope = t.codec.decode_envelope(data)
    except MessageDecodeError as exc:
        log.warning("broadcast_undecodable", reason=str(exc))
        return
    kind = envelope.recipient.partition("/")[0]
    for address in host.local_addresses(kind):
        copy = Envelope(recipient=address, body=envelope.body, id=envelope.id)
        try:
            await host.deliver(copy)
        except ActorError as exc:
            log.warning("broadcast_undelivered", to=address, reason=str(exc))


async def activated(t: RedisTransport, address: str, actor: Actor) -> None:
    """Load a durable actor's state from Redis before its ``on_start``.

    The activation is tied to the shard's current lease: if the lease is
    lost and taken again, this activation's effects are refused (it may have
    missed another owner's changes) and the actor is loaded afresh.
    """
    shard = shard_of(address, t.config.shards)
    owned = t.shards.get(shard)
    agent = t.agents.get(address)
    if agent is not None and owned is not None:
        agent.lease = owned.lease
    if not is_durable(actor):
        return
    if agent is not None:
        agent.durable = True

    async def load() -> tuple[bytes | None, list[bytes]]:
        with redis_errors(f"loading the state of {address}"):
            async with t.client.pipeline(transaction=False) as pipe:
                pipe.get(t.keys.agent_snapshot(shard, address))
                pipe.lrange(t.keys.agent_log(shard, address), 0, -1)
                snapshot, entries = await pipe.execute()
        return snapshot, entries

    snapshot, entries = await retrying(load, what="load", retry_for=t.config.retry_for)
    actor.durable_restore(snapshot, entries)
    log.debug("actor_state_loaded", actor=address, log_entries=len(entries))


# -- storing effects ------------------------------------------------------------------------


async def handled(t: RedisTransport, env: Envelope, actor: Actor | None, ok: bool) -> bool:
    """The runtime's hook: store the effect of ``env`` and ack it (see ``Transport.handled``)."""
    durable = actor is not None and is_durable(actor)
    agent = t.agents.get(env.recipient)
    if not isinstance(env, StreamEnvelope):
        # A broadcast copy: nothing to ack, but a durable actor's changes are stored.
        if not (ok and durable):
            return ok or not durable
        shard = t.shards.get(shard_of(env.recipient, t.config.shards))
        if shard is None or agent is None or agent.lease != shard.lease:
            return False
        return await _commit(t, shard, "", env, cast(Durable, actor))
    try:
        shard = t.shards.get(env.shard)
        current = shard is not None and shard.lease == env.lease
        if shard is None or not current or agent is None or agent.lease != shard.lease:
            # The shard was lost (and maybe taken again) since this actor was
            # activated or this entry read: its state may be stale.
            log.warning("effect_not_stored", actor=env.recipient, reason="shard lost meanwhile")
            return False
        if durable:
            agent.durable = True
        if not ok:
            return not durable  # not acked: delivered again after claim_idle_ms
        if durable:
            stored = await _commit(t, shard, env.entry, env, cast(Durable, actor))
        else:
            # A non-durable actor's effect lives in memory only: nothing to
            # store, so its ack can wait for the next batch.
            shard.acks.append(env.entry)
            stored = True
        if stored and env.id:
            agent.remember(env.id, t.config.applied_keep)
        return stored
    finally:
        t.dropped(env)
        if agent is not None:
            agent.last_used = time.monotonic()


async def flush_acks(t: RedisTransport, shard: Shard) -> None:
    """XACK the handled entries of non-durable actors in one fenced call.

    Raises:
        TransportUnavailableError: Redis is away (the entries stay queued).
    """
    if not shard.acks:
        return
    entries = list(shard.acks)
    await _ack(t, shard, entries)
    del shard.acks[: len(entries)]


async def _commit(
    t: RedisTransport, shard: Shard, entry: str, env: Envelope, actor: Durable
) -> bool:
    """Store a durable actor's changes, the command id and the XACK in one fenced call.

    A command that changed nothing (a read) stores nothing: its entry joins the
    batched acks, and a redelivery of it would only read again.
    """
    try:
        changes = DurableChanges(*actor.durable_changes())
    except Exception as exc:
        # The actor cannot say what changed: drop it, and let the command be
        # delivered again to a fresh activation loaded from what is stored.
        log.exception("durable_changes_failed", actor=env.recipient, msg_id=env.id)
        if env.correlation is not None:
            error = HandlerError(
                env.recipient, f"durable_changes failed: {type(exc).__name__}: {exc}"
            )
            await t.reply(env, Reply(env.correlation, error=error))
        return False
    if not changes.log_appends and changes.snapshot is None and not changes.replace_log:
        if entry:
            shard.acks.append(entry)
        return True
    number, lease, address = shard.number, shard.lease, env.recipient
    keys = [
        t.keys.lease(number),
        t.keys.stream(number),
        t.keys.agent_log(number, address),
        t.keys.agent_snapshot(number, address),
        t.keys.agent_applied(number, address),
    ]
    args: list[Any] = [
        lease,
        CONSUMER_GROUP,
        entry,
        env.id,
        f"{time.time():.6f}",
        t.config.applied_keep,
        "0" if changes.snapshot is None else "1",
        changes.snapshot or b"",
        "1" if changes.replace_log else "0",
        *changes.log_appends,
    ]

    async def commit() -> Any:
        with redis_errors(f"storing the state of {address}"):
            return await t.script("commit")(keys=keys, args=args)

    try:
        result = await retrying(commit, what="commit", retry_for=t.config.retry_for)
    except TransportError as exc:
        log.error("commit_failed", actor=address, msg_id=env.id, reason=str(exc))
        return False
    if result == -1:
        log.warning("write_fenced_off", shard=number, actor=address, msg_id=env.id)
        return False
    if result == 2:
        log.info("commit_already_stored", actor=address, msg_id=env.id)
    return True
