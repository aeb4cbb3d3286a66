"""The owner's side of a shard: read, deduplicate, deliver, load, store and ack.

Functions here work on a :class:`~actormem.runtime.redis.transport.RedisTransport`'s
state; they live apart so the transport module stays one idea (sending and
lifetimes) and this one another (consuming a shard).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Final, cast

import anyio
import redis.exceptions as rexc
import structlog

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import (
    ActorError,
    HandlerError,
    MessageDecodeError,
    RuntimeClosedError,
    TransportError,
)
from actormem.runtime.redis import _scripts
from actormem.runtime.redis._client import redis_errors, retrying, run_script
from actormem.runtime.redis.durable import Durable, DurableChanges, is_durable
from actormem.runtime.redis.keys import CONSUMER_GROUP, shard_of

if TYPE_CHECKING:
    from actormem.runtime._actor import Actor
    from actormem.runtime.redis.transport import RedisTransport

__all__ = (
    "Agent",
    "Shard",
    "StreamEnvelope",
    "activated",
    "consume",
    "fan_out",
    "flush_acks",
    "flush_commits",
    "handled",
    "retry",
    "starting",
)

log = structlog.get_logger("actormem.redis")

#: Entries read per XREADGROUP / XPENDING page.
BATCH: Final = 256
#: Commands stored per commit call, at most.
_COMMIT_BATCH: Final = 256
#: Bytes of changes stored per commit call, at most (one command may exceed it
#: alone): Redis holds a whole call in its query buffer before running it.
_COMMIT_BYTES: Final = 64 << 20
#: Handled commands waiting for their commit, per shard, before handlers wait.
_COMMIT_QUEUE: Final = 1024
#: Entries kept in the dead-letter stream, approximately.
_DLQ_MAXLEN: Final = 100_000
#: How long a redelivered entry's attempt counter lives (ms).
_ATTEMPTS_TTL_MS: Final = 24 * 3600 * 1000
#: Deliveries (started or not) after which an entry is dead-lettered anyway: one
#: that kills its worker before handling starts (while its actor loads, say).
_DELIVERY_CAP_FACTOR: Final = 10


class StreamEnvelope(Envelope, kw_only=True):
    """An envelope read from a shard stream: where to XACK it, under which lease,
    and (once handled) the commit its replies wait for."""

    shard: int = -1
    entry: str = ""
    lease: str = ""
    commit: PendingCommit | None = None
    # Handler failures so far on this delivery (each retried at once, in order).
    failures: int = 0


class RedeliveredEnvelope(StreamEnvelope, kw_only=True):
    """An entry claimed after its worker died or left it: the runtime reports when
    handling it starts (:func:`starting`), so that only attempts count towards
    ``max_deliveries``, not the deliveries of entries a dead worker had merely read."""

    track_start: ClassVar[bool] = True


class PendingCommit:
    """A handled command's changes, waiting for the shard's next group commit; the
    replies to it are sent only once it is stored."""

    __slots__ = ("changes", "envelope", "replies")

    def __init__(self, envelope: Envelope, changes: DurableChanges) -> None:
        self.envelope = envelope
        self.changes = changes
        self.replies: list[Reply] = []


class Shard:
    """A shard this worker owns: its lease value and the entries it has in flight."""

    __slots__ = (
        "acks",
        "commit_lock",
        "commit_ready",
        "commit_space",
        "commits",
        "committed",
        "inflight",
        "lease",
        "number",
        "scope",
    )

    def __init__(self, number: int, lease: str) -> None:
        self.number = number
        self.lease = lease
        self.scope = anyio.CancelScope()
        self.inflight: set[str] = set()
        # Handled entries of non-durable actors, acked in one call per batch.
        self.acks: list[str] = []
        # Durable actors' handled commands, stored in one call per batch, in order.
        self.commits: list[PendingCommit] = []
        self.commit_ready = anyio.Event()
        self.commit_space: anyio.Event | None = None
        # Set (and replaced) after every commit call.
        self.committed = anyio.Event()
        self.commit_lock = anyio.Lock(fast_acquire=True)


class Agent:
    """What this worker remembers of one actor it serves: applied command ids."""

    __slots__ = (
        "applied",
        "busy",
        "durable",
        "inflight",
        "last_used",
        "lease",
        "order",
        "shard",
        "uncommitted",
    )

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
        # Handled commands whose changes are queued for a commit.
        self.uncommitted = 0

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
    await t.forever("create_group", lambda: _ensure_group(client, stream))
    await t.wait_host_open()
    await t.forever("recover", lambda: _recover(t, shard, 0))
    claim_every = t.config.claim_idle_ms / 2000
    next_claim = time.monotonic() + claim_every
    async with anyio.create_task_group() as tg:
        tg.start_soon(_commit_loop, t, shard)
        await _read_loop(t, shard, stream, claim_every, next_claim)


async def _read_loop(
    t: RedisTransport, shard: Shard, stream: str, claim_every: float, next_claim: float
) -> None:
    client: Any = t.client
    blocking: Any = t.blocking_client
    host = t.host

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
        for entries in _streams_read(response):
            for entry_id, fields in entries:
                await _accept(t, shard, entry_id.decode(), fields)
        await t.forever("ack", lambda: flush_acks(t, shard))
        if time.monotonic() >= next_claim:
            next_claim = time.monotonic() + claim_every
            await t.forever("recover", lambda: _recover(t, shard, t.config.claim_idle_ms))
            await t.forever("trim", lambda: _trim(t, shard))


def _streams_read(response: Any) -> Any:
    """The entry lists of an XREADGROUP reply: parsed by redis-py, or as the server
    sent it (the blocking twin skips redis-py's parsing, see ``blocking_twin``)."""
    if not response:
        return ()
    if isinstance(response, dict):  # RESP3: {stream: entries}
        return response.values()
    return (entries for _stream, entries in response)


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
            reason = await _poisoned(t, shard, entry, item["times_delivered"])
            if reason is not None:
                with redis_errors(f"XRANGE {stream}"):
                    found = await client.xrange(stream, entry, entry)
                data = found[0][1].get(b"e") if found and found[0][1] else None
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
                    await _accept(t, shard, entry_id.decode(), fields, redelivered=True)
        if len(page) < BATCH:
            return
        start = "(" + page[-1]["message_id"].decode()


async def _poisoned(t: RedisTransport, shard: Shard, entry: str, delivered: int) -> str | None:
    """Why a pending entry goes to the dead letters instead of being claimed, if it does.

    A worker reads entries in batches, so one that dies leaves many pending that
    it never started; counting those deliveries would dead-letter innocent commands
    after a few unrelated crashes. What counts is how often handling started and
    never returned: the first delivery (always, as nothing records it), and every
    redelivered attempt that did not finish (:func:`starting` counts them,
    :func:`_finished` forgets them once one returns). A hard cap on deliveries
    catches an entry that kills its worker before handling starts.
    """
    limit = t.config.max_deliveries
    if delivered >= limit * _DELIVERY_CAP_FACTOR:
        return f"delivered {delivered} times without being handled (max_deliveries={limit})"
    started = 1
    if delivered >= 2 and limit >= 2:
        with redis_errors("GET attempts"):
            started += int(await t.client.get(t.keys.attempts(shard.number, entry)) or 0)
    if started < limit:
        return None
    return (
        f"handling it started {started} times and never finished "
        f"(delivered {delivered} times; max_deliveries={limit})"
    )


async def starting(t: RedisTransport, env: Envelope) -> None:
    """The runtime's hook: handling a redelivered entry starts; count the attempt."""
    if not isinstance(env, StreamEnvelope):
        return
    key = t.keys.attempts(env.shard, env.entry)
    try:
        with redis_errors("INCR attempts"):
            async with t.client.pipeline(transaction=True) as pipe:
                pipe.incr(key)
                pipe.pexpire(key, _ATTEMPTS_TTL_MS)
                await pipe.execute()
    except TransportError as exc:
        # Uncounted, the attempt only delays poison detection (the delivery cap holds).
        log.warning("attempt_not_counted", entry=env.entry, reason=str(exc))


def _finished(t: RedisTransport, env: StreamEnvelope) -> None:
    """Handling a redelivered entry returned (whatever its outcome): it did not kill
    its worker, so the attempts :func:`starting` counted are forgotten. What is left
    counted is only handling that never returned: a crash that hit while the entry's
    commit was still queued does not make it a poison pill.

    The counters are deleted in the background, a burst in one pipeline: a worker
    taking over a dead one's backlog must not wait a round trip per entry.
    """
    t.finished_attempts.append(t.keys.attempts(env.shard, env.entry))
    if len(t.finished_attempts) == 1:
        try:
            t.host.spawn(_forget_attempts, t)
        except RuntimeClosedError:  # closing: left counted, only dead-lettered sooner
            t.finished_attempts.clear()


async def _forget_attempts(t: RedisTransport) -> None:
    await anyio.lowlevel.checkpoint()  # let the rest of a burst gather
    keys, t.finished_attempts = t.finished_attempts, []
    try:
        with redis_errors("DEL attempts"):
            async with t.client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.delete(key)
                await pipe.execute()
    except TransportError as exc:
        # Left counted, those entries are only dead-lettered sooner if crashes recur.
        log.warning("attempts_not_cleared", entries=len(keys), reason=str(exc))


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


async def _accept(
    t: RedisTransport,
    shard: Shard,
    entry: str,
    fields: dict[bytes, bytes] | list[bytes],
    redelivered: bool = False,
) -> None:
    """Check, deduplicate and deliver one stream entry (``redelivered``: claimed
    from the pending list, not read new)."""
    data = _field_e(fields)
    if data is None:
        await _dead_letter(t, shard, entry, None, "the entry has no 'e' field")
        return
    if len(data) > t.config.max_message_bytes:
        reason = (
            f"the entry is {len(data)} bytes, over max_message_bytes={t.config.max_message_bytes}"
        )
        await _dead_letter(t, shard, entry, data, reason)
        return
    kind = RedeliveredEnvelope if redelivered else StreamEnvelope
    try:
        env = t.codec.decode_envelope(
            data, kind, shard=shard.number, entry=entry, lease=shard.lease
        )
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
    agent = t.agents.get(env.recipient) or await _agent(t, env.recipient, shard.number)
    if env.id and (env.id in agent.applied or env.id in agent.inflight):
        t.duplicates += 1
        log.info("duplicate_skipped", actor=env.recipient, msg_id=env.id, entry=entry)
        await _ack(t, shard, [entry])
        return
    delivery = cast(StreamEnvelope, env)
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


def _field_e(fields: Any) -> bytes | None:
    """The ``e`` field of an entry: from redis-py's dict, or the server's flat
    ``[name, value, ...]`` list."""
    if type(fields) is list:
        if len(fields) == 2 and fields[0] == b"e":  # what every sender writes
            return cast(bytes, fields[1])
        pairs = dict(zip(fields[::2], fields[1::2], strict=False))
        return pairs.get(b"e")
    return cast(dict[bytes, bytes], fields).get(b"e")


def _envelope_fields(env: Envelope) -> dict[str, Any]:
    """The fields an :class:`Envelope` has, as keyword arguments (to copy it)."""
    return {name: getattr(env, name) for name in Envelope.__struct_fields__}


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
    """Write ``entry`` to the dead-letter stream (once: a second write, after a worker
    died before the ack, adds nothing), then ack it."""
    stream = t.keys.stream(shard.number)
    fields: list[Any] = [b"reason", reason, b"stream", stream, b"entry", entry, b"worker", t.id]
    if data is not None:
        fields += [b"e", data]
    with redis_errors("XADD to the dead letters"):
        written = await run_script(
            t.client,
            _scripts.DEAD_LETTER,
            [t.keys.dead_letters(), t.keys.dead_letter_index()],
            [f"{stream} {entry}", _DLQ_MAXLEN, f"{time.time():.6f}", *fields],
        )
    await _ack(t, shard, [entry])
    if written:
        t.dead_lettered += 1
        log.warning("dead_lettered", stream=stream, entry=entry, reason=reason)
    else:
        log.info("dead_letter_already_written", stream=stream, entry=entry)


async def _ack(t: RedisTransport, shard: Shard, entries: list[str]) -> None:
    with redis_errors("XACK"):
        result = await run_script(
            t.client,
            _scripts.ACK,
            [t.keys.lease(shard.number), t.keys.stream(shard.number)],
            [shard.lease, CONSUMER_GROUP, *entries],
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
        # A fresh activation (after a failure) must see what its predecessor
        # handled: wait until those changes are stored.
        while agent.uncommitted and owned is not None and t.shards.get(shard) is owned:
            await owned.committed.wait()

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
    """The runtime's hook: store the effect of ``env`` and ack it (see ``Transport.handled``).

    A durable actor's changes join the shard's next group commit; the replies to
    the command wait for it (see :meth:`RedisTransport.reply`), and so does a
    fresh activation of the actor.
    """
    if isinstance(env, RedeliveredEnvelope):
        _finished(t, env)
    durable = actor is not None and is_durable(actor)
    agent = t.agents.get(env.recipient)
    if not isinstance(env, StreamEnvelope):
        # A broadcast copy: nothing to ack, but a durable actor's changes are stored.
        if not (ok and durable):
            return ok or not durable
        shard = t.shards.get(shard_of(env.recipient, t.config.shards))
        if shard is None or agent is None or agent.lease != shard.lease:
            return False
        changes = await _changes(t, env, cast(Durable, actor))
        if changes is None:
            return False
        if _stores_something(changes):
            await _queue_commit(t, shard, agent, env, changes)
        return True
    queued = False
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
            changes = await _changes(t, env, cast(Durable, actor))
            if changes is None:
                return False
            if _stores_something(changes):
                # Stored (and acked, and its id remembered) by the group commit.
                await _queue_commit(t, shard, agent, env, changes)
                queued = True
                return True
        # Nothing to store (a read, or a non-durable actor, whose effect lives in
        # memory only): its ack can wait for the next batch.
        shard.acks.append(env.entry)
        if env.id:
            agent.remember(env.id, t.config.applied_keep)
        return True
    finally:
        if not queued:
            t.dropped(env)
        if agent is not None:
            agent.last_used = time.monotonic()


async def retry(t: RedisTransport, env: Envelope, allowed: bool) -> bool:
    """The runtime's hook after a handler failed: deliver ``env`` again at once (so
    its agent's later commands wait), or, after ``max_deliveries`` failures or when
    the actor's restart budget is spent, dead-letter it (so they do not wait for ever)."""
    if not isinstance(env, StreamEnvelope):
        return False
    shard = t.shards.get(env.shard)
    if shard is None or shard.lease != env.lease:
        return False  # no longer ours: it stays pending for the shard's new owner
    env.failures += 1
    if allowed and env.failures < t.config.max_deliveries:
        # In flight again (handled() let go of it): not claimed, not duplicated.
        shard.inflight.add(env.entry)
        agent = t.agents.get(env.recipient)
        if agent is not None:
            if env.id:
                agent.inflight.add(env.id)
            agent.busy += 1
        t.redelivered += 1
        return True
    reason = (
        f"the handler failed {env.failures} times in a row"
        + ("" if allowed else " (the actor's restart budget is spent)")
        + f" (max_deliveries={t.config.max_deliveries})"
    )
    data = t.codec.encode_envelope(Envelope(**_envelope_fields(env)))
    try:
        await _dead_letter(t, shard, env.entry, data, reason)
    except TransportError as exc:
        # Left pending: delivered again after claim_idle_ms, and dead-lettered then.
        log.warning("dead_letter_failed", entry=env.entry, reason=str(exc))
    return False


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


async def _changes(t: RedisTransport, env: Envelope, actor: Durable) -> DurableChanges | None:
    """What ``env`` changed in ``actor`` (empty: nothing to store); None if the actor
    cannot say (it is then dropped, and the command delivered again to a fresh
    activation loaded from what is stored)."""
    try:
        changes = DurableChanges(*actor.durable_changes())
    except Exception as exc:
        log.exception("durable_changes_failed", actor=env.recipient, msg_id=env.id)
        if env.correlation is not None:
            error = HandlerError(
                env.recipient, f"durable_changes failed: {type(exc).__name__}: {exc}"
            )
            await t.reply(env, Reply(env.correlation, error=error))
        return None
    return changes


def _stores_something(changes: DurableChanges) -> bool:
    """False for a command that changed nothing (a read): it needs no commit, and its
    reply need not wait for one (a NamedTuple is truthy even when empty)."""
    return bool(changes.log_appends) or changes.snapshot is not None or changes.replace_log


async def _queue_commit(
    t: RedisTransport, shard: Shard, agent: Agent, env: Envelope, changes: DurableChanges
) -> None:
    """Queue ``changes`` for the shard's next group commit, waiting while it is full."""
    while len(shard.commits) >= _COMMIT_QUEUE:
        if shard.commit_space is None:
            shard.commit_space = anyio.Event()
        await shard.commit_space.wait()
    pending = PendingCommit(env, changes)
    if isinstance(env, StreamEnvelope):
        env.commit = pending
    shard.commits.append(pending)
    agent.uncommitted += 1
    shard.commit_ready.set()


async def _commit_loop(t: RedisTransport, shard: Shard) -> None:
    """Store the shard's queued changes, a batch per call, for as long as it is owned.

    While one call is in flight the handlers go on and the next batch gathers:
    the cost of a commit is shared by every command it carries.
    """
    while True:
        await shard.commit_ready.wait()
        shard.commit_ready = anyio.Event()
        await t.forever("commit", lambda: flush_commits(t, shard))


async def flush_commits(t: RedisTransport, shard: Shard) -> None:
    """Store every queued commit of ``shard`` (fenced, one call per batch), then send
    the replies that waited for them.

    A call whose reply was lost is simply made again: commands already applied
    (by id) are only acked. When the shard's lease is no longer ours the queued
    changes are dropped: their entries stay pending for the new owner.

    Raises:
        TransportError: Redis is away or failed (the batch stays queued).
    """
    async with shard.commit_lock:
        while shard.commits:
            batch = _next_commit_batch(shard.commits)
            statuses = await _store(t, shard, batch)
            del shard.commits[: len(batch)]
            answered: list[tuple[Envelope, Reply]] = []
            found: list[int | None] = list(statuses) if statuses is not None else []
            found += [None] * (len(batch) - len(found))
            for status, pending in zip(found, batch, strict=True):
                _committed(t, status, pending, statuses is not None, answered)
            space, shard.commit_space = shard.commit_space, None
            if space is not None:
                space.set()
            done, shard.committed = shard.committed, anyio.Event()
            done.set()
            if answered:
                await t.send_replies(answered)


def _next_commit_batch(commits: list[PendingCommit]) -> list[PendingCommit]:
    """The queued commits the next call stores: the oldest, up to ``_COMMIT_BATCH``
    commands and about ``_COMMIT_BYTES`` of changes (at least one command)."""
    size = 0
    for n, pending in enumerate(commits[:_COMMIT_BATCH]):
        changes = pending.changes
        size += len(changes.snapshot or b"") + sum(map(len, changes.log_appends))
        if size > _COMMIT_BYTES and n > 0:
            return commits[:n]
    return commits[:_COMMIT_BATCH]


def _committed(
    t: RedisTransport,
    status: int | None,
    pending: PendingCommit,
    stored: bool,
    answered: list[tuple[Envelope, Reply]],
) -> None:
    env = pending.envelope
    agent = t.agents.get(env.recipient)
    if agent is not None:
        agent.uncommitted = max(agent.uncommitted - 1, 0)
        if stored and env.id:
            agent.remember(env.id, t.config.applied_keep)
    if status == 2:
        log.info("commit_already_stored", actor=env.recipient, msg_id=env.id)
    if stored:
        answered.extend((env, reply) for reply in pending.replies)
    if isinstance(env, StreamEnvelope):
        env.commit = None
        t.dropped(env)


async def _store(t: RedisTransport, shard: Shard, batch: list[PendingCommit]) -> list[int] | None:
    """One fenced call storing ``batch``; its statuses in ``batch`` order, or None when
    fenced off. The commands go grouped by agent (each agent's own in order)."""
    number = shard.number
    by_agent: dict[str, list[int]] = {}
    for i, pending in enumerate(batch):
        group = by_agent.get(pending.envelope.recipient)
        if group is None:
            by_agent[pending.envelope.recipient] = [i]
        else:
            group.append(i)
    keys = [t.keys.lease(number), t.keys.stream(number)]
    args: list[Any] = [shard.lease, CONSUMER_GROUP, f"{time.time():.6f}", t.config.applied_keep]
    order: list[int] = []
    for address, indices in by_agent.items():
        keys += (
            t.keys.agent_log(number, address),
            t.keys.agent_snapshot(number, address),
            t.keys.agent_applied(number, address),
        )
        args.append(len(indices))
        order += indices
        for i in indices:
            env, changes = batch[i].envelope, batch[i].changes
            args += (
                env.entry if isinstance(env, StreamEnvelope) else "",
                env.id,
                "0" if changes.snapshot is None else "1",
                changes.snapshot or b"",
                "1" if changes.replace_log else "0",
                len(changes.log_appends),
                *changes.log_appends,
            )
    with redis_errors(f"storing the state of {len(batch)} commands of shard {number}"):
        result = await run_script(t.client, _scripts.COMMIT, keys, args)
    if result == -1:
        log.warning("write_fenced_off", shard=number, commands=len(batch))
        return None
    statuses = [0] * len(batch)
    for i, status in zip(order, result, strict=True):
        statuses[i] = int(status)
    return statuses
