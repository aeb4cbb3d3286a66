"""Group commit: how a worker stores the effects of the commands it handled.

A durable actor's changes join its shard's next *group commit*: one fenced Lua
call stores every command handled while the previous call was in flight (its
changes, its id among the applied ones, the reply to it if it was asked, the
tells it sent that are not written yet (``_unsent``), its XACK), and the replies
to those commands go only once their changes are stored: the call writes them to
their askers' reply streams itself, where it can (not on a Redis Cluster). Two
calls of a shard may be in flight at once, each for actors the other does not
hold, so a slow call holds back only its own actors' next changes. A reply kept so
(until its ask's deadline, at most ``reply_ttl_ms``) answers the same ask sent
again, even after the worker that applied it died before its reply went out. A
command that stores nothing (a read, or one to an actor that is not durable) is
acked by a fenced call too, which goes with a call made anyway: the reply outbox's
next write, after the reply, or the next shard read (see ``_acks``); unless it
sent tells not written yet (then it joins the commit). A durable actor's state is
loaded from Redis when it is activated.

A durable actor is one that implements :class:`~actormem.runtime.state.Durable`:
a *virtual actor* here, passivated (dropped from memory) after ``passivate_after``
idle seconds. Its log is a Redis list, extended by RPUSH with only the entries
added since the last commit (or replaced, with ``replace_log``); its snapshot is
one string key, rewritten when it changed (see
:class:`~actormem.runtime.redis.keys.Keys`).
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Final, cast

import anyio
import structlog

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import HandlerError, TransportError
from actormem.runtime.redis import _scripts
from actormem.runtime.redis._acks import Acks
from actormem.runtime.redis._client import is_cluster, redis_errors, run_script
from actormem.runtime.redis._commit_call import CommitCalls
from actormem.runtime.redis._due import DueTimes
from actormem.runtime.redis._erasure import Erasure
from actormem.runtime.redis._retry import forever, retrying
from actormem.runtime.redis._rounds import Rounds, rounds
from actormem.runtime.redis._shards import PendingCommit, StreamEnvelope
from actormem.runtime.redis._unsent import Unsent
from actormem.runtime.redis._wire import wire
from actormem.runtime.redis.keys import CONSUMER_GROUP, shard_of
from actormem.runtime.redis.trace import Stage
from actormem.runtime.state import Durable, DurableChanges, is_durable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from actormem.runtime._actor import Actor
    from actormem.runtime.metrics import Metrics
    from actormem.runtime.redis._replies import Replies
    from actormem.runtime.redis._shards import ActorRecord, Holdings, Link, Shard

__all__ = ("GroupCommit",)

log = structlog.get_logger("actormem.redis")

#: Commands stored per commit call, at most.
_COMMIT_BATCH: Final = 256
#: Bytes of changes stored per commit call, at most (one command may exceed it
#: alone): Redis holds a whole call in its query buffer before running it.
_COMMIT_BYTES: Final = 64 << 20
#: Handled commands waiting for their commit, per shard, before handlers wait.
_COMMIT_QUEUE: Final = 1024
#: Commit calls in flight per shard, at most (each for actors the others do not hold).
_COMMIT_CALLS: Final = 2


class GroupCommit:
    """Stores and acks what the actors of the owned shards handled.

    Args:
        link: the transport.
        held: the shards and actors this worker holds.
        replies: where the replies that waited for a commit go.
        unsent: keeps the tells of stored commands until the outbox wrote them.

    Attributes:
        metrics: records each commit's size and time (None: metrics are off).
    """

    def __init__(self, link: Link, *, held: Holdings, replies: Replies, unsent: Unsent) -> None:
        self._link = link
        self._config = link.config
        self._keys = link.keys
        self._held = held
        self._replies = replies
        self._unsent = unsent
        self._erasure = Erasure(link)
        self.metrics: Metrics | None = None
        #: Told of each tell handed over in memory (``_handover``) whose commit is
        #: over: the command, and whether it was stored.
        self.tell_settled: Callable[[StreamEnvelope, bool], None] | None = None
        #: The due times of the actors of the shards owned here.
        self.due = DueTimes(link, held)
        self._calls = CommitCalls(link, replies=replies, unsent=unsent, due=self.due)
        # Calls started while another of their shard was in flight, and how many may
        # be at once: a share of the connection pool, the rest kept for the others.
        self._second_calls = 0
        self._second_limit = max(1, self._config.pool_size // 4)
        # The rounds of the client the commit calls go through, and that client.
        self._rounds_of: object = None
        self._round_calls: Rounds | None = None

    async def activated(self, address: str, actor: Actor) -> None:
        """Load a durable actor's state from Redis before its ``on_start``.

        The activation is tied to the shard's current lease: if the lease is
        lost and taken again, this activation's effects are refused (it may have
        missed another owner's changes) and the actor is loaded afresh.
        """
        held = self._held
        shard = shard_of(address, self._config.shards)
        owned = held.shards.get(shard)
        record = held.actors.get(address)
        loaded = None
        if record is not None:
            # What was read with its record serves its first activation only.
            loaded, record.loaded = record.loaded, None
            if owned is not None:
                record.lease = owned.lease
        if not is_durable(actor):
            return
        if record is not None:
            record.durable = True
            # A fresh activation (after a failure) must see what its predecessor
            # handled: wait until those changes are stored.
            while record.uncommitted and owned is not None and held.shards.get(shard) is owned:
                await _committed_event(owned).wait()

        async def load() -> tuple[bytes | None, list[bytes]]:
            with redis_errors(f"loading the state of {address}"):
                async with self._link.client.pipeline(transaction=False) as pipe:
                    pipe.get(self._keys.actor_snapshot(shard, address))
                    pipe.lrange(self._keys.actor_log(shard, address), 0, -1)
                    snapshot, entries = await pipe.execute()
            return snapshot, entries

        if (
            loaded is not None
            and owned is not None
            and held.shards.get(shard) is owned
            and loaded[0] == owned.lease
        ):
            _, snapshot, entries = loaded
        else:
            snapshot, entries = await retrying(load, what="load", retry_for=self._config.retry_for)
        actor.durable_restore(snapshot, entries)
        log.debug("actor_state_loaded", actor=address, log_entries=len(entries))

    async def handled(self, env: Envelope, actor: Actor | None, ok: bool) -> bool:
        """Store the effect of ``env`` and ack it (see ``Transport.handled``).

        A durable actor's changes join the shard's next group commit; the replies to
        the command wait for it (see :meth:`Replies.reply`), and so does a fresh
        activation of the actor.
        """
        held = self._held
        # (A durable class is known without a call: see :func:`_durable`.)
        durable = actor is not None and (_DURABLE_CLASSES.get(type(actor)) or _durable(actor))
        record = held.actors.get(env.recipient)
        if not isinstance(env, StreamEnvelope):
            # A broadcast copy: nothing to ack, but a durable actor's changes are stored.
            if not (ok and durable):
                return ok or not durable
            shard = held.shards.get(shard_of(env.recipient, self._config.shards))
            if shard is None or record is None or record.lease != shard.lease:
                return False
            changes = await self._changes(env, cast(Durable, actor))
            if changes is None:
                return False
            if _stores_something(changes):
                await self._queue(shard, record, [env], changes)
            return True
        queued = False
        try:
            shard = held.shards.get(env.shard)
            current = shard is not None and shard.lease == env.lease
            if shard is None or not current or record is None or record.lease != shard.lease:
                # The shard was lost (and maybe taken again) since this actor was
                # activated or this entry read: its state may be stale.
                log.warning("effect_not_stored", actor=env.recipient, reason="shard lost meanwhile")
                return False
            if durable:
                record.durable = True
            if not ok:
                self._unsent.failed(env)
                return not durable  # not acked: delivered again after claim_idle_ms
            if durable:
                # The usual command, without a coroutine of its own for its changes
                # (see :meth:`_changes`) nor for queueing them (see :meth:`_queue`).
                try:
                    changes = actor.durable_changes()  # type: ignore[union-attr]
                    if type(changes) is not DurableChanges:
                        changes = DurableChanges(*changes)  # a plain tuple of its fields
                except Exception as exc:
                    await self._changes_failed(env, exc)
                    return False
                if changes.erase and not await self._erase(shard, record, env):
                    return False
                if changes.trim_streams:
                    await self._trim_sent(env)
                if changes.log_appends or _stores_something(changes):  # (an add appends)
                    # Stored (and acked, and its id remembered) by the group commit.
                    if len(shard.commits) >= _COMMIT_QUEUE:
                        await self._commit_space(shard)
                    self._enqueue(shard, record, [env], changes, remember=True)
                    queued = True
                    return True
            if self._unsent.waiting(env) or (durable and _handed_tell(env)):
                # Its tells are not all written yet: its ack goes with them, in a commit.
                # A tell handed over in memory has its id stored all the same: its
                # sender keeps it until then (see ``_handover``).
                await self._queue(shard, record, [env], _NO_CHANGES, remember=durable)
                queued = True
                return True
            # Nothing to store (a read, or a non-durable actor, whose effect lives in
            # memory only): its ack goes with a later call. Its reply is queued next,
            # with no wait in between: an ack taken along with the replies of the
            # reply outbox follows its own reply (see ``_acks``).
            if env.entry:  # a command handed over in memory has none
                shard.acks.append(env.entry)
            if env.id:
                record.remember(env.id, self._config.applied_keep)
            return True
        finally:
            if not queued:
                held.dropped(env)
            if record is not None:
                record.last_used = time.monotonic()

    async def handled_batch(self, envelopes: list[Envelope], actor: Actor) -> bool | None:
        """Store the effect of a batch of one durable actor's commands (see
        ``Transport.handled_batch``): one change set for all of them, one entry of
        the shard's group commit, their replies sent once it is stored.

        Returns:
            True when the changes are queued (or there were none), False when the
            shard was lost meanwhile (the actor is then dropped and the commands
            stay pending for the shard's owner; those handed over in memory go
            through the stream, see ``RedisTransport.handled_batch``), None when
            the changes cannot be stored as one set (they erase, trim the streams,
            or discard a command): the commands are handled again, one at a time,
            by a fresh activation.
        """
        held = self._held
        first = cast(StreamEnvelope, envelopes[0])
        record = held.actors.get(first.recipient)
        shard = held.shards.get(first.shard)
        kept = False
        try:
            if (
                shard is None
                or record is None
                or record.lease != shard.lease
                or any(e.lease != shard.lease for e in cast("list[StreamEnvelope]", envelopes))
            ):
                log.warning(
                    "effect_not_stored", actor=first.recipient, reason="shard lost meanwhile"
                )
                return False
            changes = await self._changes(envelopes[-1], cast(Durable, actor))
            if changes is None:
                return False
            if changes.erase or changes.trim_streams or changes.discarded:
                for env in envelopes:
                    self._unsent.failed(env)
                kept = True  # still in flight: handled again
                return None
            if (
                _stores_something(changes)
                or any(map(self._unsent.waiting, envelopes))
                or any(map(_handed_tell, envelopes))
            ):
                # A tell handed over in memory has its id stored all the same (see
                # :meth:`handled`).
                await self._queue(shard, record, envelopes, changes)
                kept = True
                return True
            keep = self._config.applied_keep
            for env in envelopes:
                entry = cast(StreamEnvelope, env).entry
                if entry:  # a command handed over in memory has none
                    shard.acks.append(entry)
                record.remember(env.id, keep)
            return True
        finally:
            if not kept:
                for env in envelopes:
                    held.dropped(env)
            if record is not None:
                record.last_used = time.monotonic()

    async def _changes(self, env: Envelope, actor: Durable) -> DurableChanges | None:
        """What ``env`` (the last command handled since the previous call) changed in
        ``actor`` (empty: nothing to store); None if the actor cannot say (it is then
        dropped, and the command delivered again to a fresh activation loaded from
        what is stored)."""
        try:
            changes = actor.durable_changes()
            if type(changes) is not DurableChanges:
                changes = DurableChanges(*changes)  # a plain tuple of its fields
        except Exception as exc:
            await self._changes_failed(env, exc)
            return None
        return changes

    async def _changes_failed(self, env: Envelope, exc: Exception) -> None:
        """The actor could not say what ``env`` changed (``exc``, being handled): log
        it, and answer the ask with a :class:`HandlerError`."""
        log.exception("durable_changes_failed", actor=env.recipient, msg_id=env.id)
        if env.correlation is not None:
            error = HandlerError(
                env.recipient, f"durable_changes failed: {type(exc).__name__}: {exc}"
            )
            await self._replies.reply(env, Reply(env.correlation, error=error))

    async def _erase(self, shard: Shard, record: ActorRecord, env: StreamEnvelope) -> bool:
        """Remove the actor's entries before ``env`` (see :mod:`._erasure`) once the
        effects of the commands they carried are stored; False when that could not be
        done (the command is then delivered again, to the state stored before it)."""
        if not env.entry:
            return False  # handed over in memory: no entry to cut at; it goes by the stream
        held = self._held
        while record.uncommitted and held.shards.get(shard.number) is shard:
            await _committed_event(shard).wait()
        if held.shards.get(shard.number) is not shard or shard.lease != env.lease:
            return False
        try:
            await retrying(
                lambda: self._erasure.erase(env.recipient, env.shard, env.entry),
                what="erase",
                retry_for=self._config.retry_for,
            )
        except TransportError as exc:
            log.warning("erase_failed", actor=env.recipient, msg_id=env.id, reason=str(exc))
            return False
        return True

    async def _trim_sent(self, env: Envelope) -> None:
        """Trim what the streams keep of the messages sent before ``env``'s change
        (``DurableChanges.trim_streams``); a failure is logged, and leaves them to
        the streams' own trimming."""
        try:
            # The entries of reads handled before it are acked first: the trim stops
            # below the first entry still pending.
            for shard in list(self._held.shards.values()):
                await retrying(
                    functools.partial(self.flush_acks, shard),
                    what="ack",
                    retry_for=self._config.retry_for,
                )
            await retrying(self._erasure.trim_sent, what="trim", retry_for=self._config.retry_for)
        except TransportError as exc:
            log.warning("trim_failed", actor=env.recipient, msg_id=env.id, reason=str(exc))

    async def _queue(
        self,
        shard: Shard,
        record: ActorRecord,
        envelopes: list[Envelope],
        changes: DurableChanges,
        *,
        remember: bool = True,
    ) -> None:
        """Queue ``changes`` of ``envelopes`` (one command, or a batch of one actor's)
        for the shard's next group commit, waiting while it is full (``remember``:
        store the commands' ids among the actor's applied ones)."""
        await self._commit_space(shard)
        self._enqueue(shard, record, envelopes, changes, remember=remember)

    @staticmethod
    async def _commit_space(shard: Shard) -> None:
        """Wait while ``shard``'s commit queue is full."""
        while len(shard.commits) >= _COMMIT_QUEUE:
            if shard.commit_space is None:
                shard.commit_space = anyio.Event()
            await shard.commit_space.wait()

    def _enqueue(
        self,
        shard: Shard,
        record: ActorRecord,
        envelopes: list[Envelope],
        changes: DurableChanges,
        *,
        remember: bool,
    ) -> None:
        """Queue ``changes`` of ``envelopes`` now (see :meth:`_queue`)."""
        pending = PendingCommit(envelopes, changes, remember)
        for env in envelopes:
            if isinstance(env, StreamEnvelope):
                env.commit = pending
        shard.commits.append(pending)
        record.uncommitted += 1
        idle = shard.commit_idle
        if idle and idle[-1] is not shard.commit_woken:
            self._wake(shard)  # (else the loop it would wake is woken already)

    async def run(self, shard: Shard) -> None:
        """Store the shard's queued changes, a batch per call, for as long as it is owned.

        While a call is in flight the handlers go on and the next batch gathers: the
        cost of a commit is shared by every command it carries. The batch of actors
        that call does not hold need not wait for it: up to ``_COMMIT_CALLS`` calls
        are in flight at once, each for actors the others do not hold, so that an
        actor's changes are stored in the order it made them (each Lua call is
        atomic and fenced on its own). A worker's second calls take a quarter of its
        connection pool at most.

        Each of the ``_COMMIT_CALLS`` calls is made by a loop of its own, which takes
        the next batch as soon as its call returned, and otherwise waits until a
        handler queues changes (see :meth:`_wake`).
        """
        async with anyio.create_task_group() as tg:
            for _ in range(_COMMIT_CALLS):
                tg.start_soon(self._commit_loop, shard)

    async def _commit_loop(self, shard: Shard) -> None:
        """Store batches of ``shard``'s queue, one call at a time, until cancelled."""
        idle = shard.commit_idle
        while True:
            second = shard.calls > 0
            limited = second and self._second_calls >= self._second_limit
            batch = None if limited else _take(shard)
            if batch:
                if idle and shard.commits:
                    self._wake(shard)  # more is queued: another call may take it
                await self._commit(shard, batch, retry=True, second=second)
                continue
            woken = anyio.Event()
            idle.append(woken)
            try:
                await woken.wait()
            finally:
                idle.remove(woken)
                if woken.is_set():
                    self._rounds().arrived()

    def _wake(self, shard: Shard) -> None:
        """Wake one of ``shard``'s idle commit loops to take what is queued, unless one
        is woken already; its call is announced to the rounds, so that the calls made
        before it runs wait for it (see :class:`Rounds`)."""
        idle = shard.commit_idle
        if idle and not idle[-1].is_set():
            woken = shard.commit_woken = idle[-1]
            woken.set()
            self._rounds().announce()

    def _rounds(self) -> Rounds:
        """The rounds the commit calls go in (those of the transport's client)."""
        client = self._link.client
        if self._rounds_of is not client:
            self._rounds_of, self._round_calls = client, rounds(client)
        return cast("Rounds", self._round_calls)

    async def _commit(
        self, shard: Shard, batch: list[PendingCommit], *, retry: bool, second: bool = False
    ) -> None:
        """Store ``batch`` (taken off the queue, its actors held), retrying while Redis
        is away if ``retry``; when that fails or is cancelled (the shard is lost or
        given back) the batch goes back to the head of the queue, stored or not:
        settling stores it again (once more, if it was, only acks it), or the shard's
        next owner handles its commands again (``second``: started while another call
        of the shard was in flight).

        Raises:
            TransportError: Redis is away or failed (without ``retry``).
        """
        store = functools.partial(self._store_timed, shard, batch)
        self._second_calls += second
        try:
            statuses = await (forever("commit", store) if retry else store())
        except BaseException:
            shard.commits[:0] = batch
            raise
        finally:
            self._second_calls -= second
            _release(shard, batch)
        await self._stored(shard, batch, statuses)

    async def flush(self, shard: Shard) -> None:
        """Store every queued commit of ``shard`` (fenced, one call per batch), then send
        the replies that waited for them (after the calls in flight, if any).

        A call whose reply was lost is simply made again: commands already applied
        (by id) are only acked. When the shard's lease is no longer ours the queued
        changes are dropped: their entries stay pending for the new owner.

        Raises:
            TransportError: Redis is away or failed (the batch stays queued).
        """
        async with shard.commit_lock:
            while shard.commits or shard.calls:
                batch = _take(shard)
                if not batch:
                    # What is queued waits for the calls in flight (they hold its actors).
                    await _committed_event(shard).wait()
                    continue
                await self._commit(shard, batch, retry=False)

    async def _store_timed(self, shard: Shard, batch: list[PendingCommit]) -> list[int] | None:
        """:meth:`CommitCalls.store`, its size and time recorded when metrics are on, its stages
        when the transport traces (see ``trace``)."""
        metrics, trace = self.metrics, self._link.trace
        if metrics is None and trace is None:
            return await self._calls.store(shard, batch)
        started = time.perf_counter()
        if trace is not None:
            trace.commit(batch, Stage.COMMITTING)
        statuses = await self._calls.store(shard, batch)
        if trace is not None:
            trace.commit(batch, Stage.COMMITTED)
        if metrics is not None:
            elapsed = time.perf_counter() - started
            metrics.committed(sum(len(p.envelopes) for p in batch), elapsed)
        return statuses

    async def _stored(
        self, shard: Shard, batch: list[PendingCommit], statuses: list[int] | None
    ) -> None:
        """Settle ``batch`` after its call: remember its ids, wake who waits for it,
        and send the replies the call did not write."""
        answered: list[tuple[Envelope, Reply, bytes | None]] = []
        discarded = self._committed(batch, statuses, answered)
        if statuses is not None and discarded:
            await self._erasure.delete_discarded(shard.number, batch)
        space, shard.commit_space = shard.commit_space, None
        if space is not None:
            space.set()
        if answered:
            await self._replies.send(answered)

    def _committed(
        self,
        batch: list[PendingCommit],
        statuses: list[int] | None,
        answered: list[tuple[Envelope, Reply, bytes | None]],
    ) -> bool:
        """Settle each pending commit of ``batch`` after its call (``statuses``: the
        call's, one per pending commit; None when it stored nothing): remember its
        commands' ids, let go of them, and add to ``answered`` the replies the call
        did not write. True when one of them discarded its command."""
        held = self._held
        actors, shards, settled = held.actors, held.shards, self.tell_settled
        keep = self._config.applied_keep
        found: list[int] = statuses or []
        known = len(found)
        discarded = False
        for n, pending in enumerate(batch):
            status = found[n] if n < known else None
            stored = statuses is not None
            envelopes = pending.envelopes
            address = envelopes[0].recipient
            record = actors.get(address)
            if status == 3:
                # Some commands of the batch were applied already and some not: only
                # possible if another writer got past the fence. Nothing of it is
                # stored or acked; the actor is dropped at its next command (its
                # memory holds changes that are not stored), and the commands are
                # delivered again.
                log.error("commit_partly_applied", actor=address, commands=len(envelopes))
                stored = False
                if record is not None:
                    record.lease = ""
            if record is not None:
                record.uncommitted = max(record.uncommitted - 1, 0)
                if stored:
                    for env in envelopes:
                        if env.id:
                            record.remember(env.id, keep)
            if status == 2:
                log.info("commit_already_stored", actor=address, msg_ids=[e.id for e in envelopes])
            replies = pending.replies
            if stored and replies and len(pending.written) < len(replies):
                kept = pending.kept_replies or {}
                written = pending.written
                answered.extend(
                    (env, reply, kept.get(env.id))
                    for m, (env, reply) in enumerate(replies)
                    if m not in written
                )
            for env in envelopes:
                if isinstance(env, StreamEnvelope):
                    env.commit = None
                    # Holdings.dropped(env), inline (``record`` is its recipient's): the
                    # entry and the command are no longer in flight, unless the shard's
                    # lease changed since it was read.
                    current = shards.get(env.shard)
                    if current is not None and current.lease == env.lease:
                        current.inflight.discard(env.entry)
                        if record is not None:
                            record.inflight.discard(env.id)
                            record.busy = max(record.busy - 1, 0)
                    if settled is not None and not env.entry and env.correlation is None:
                        settled(env, stored)  # a tell handed over in memory (``_handed_tell``)
            if pending.changes.discarded:
                discarded = True
        return discarded

    async def flush_acks(self, shard: Shard) -> None:
        """XACK the handled entries of non-durable actors in one fenced call.

        Raises:
            TransportUnavailableError: Redis is away (the entries stay queued).
        """
        if not shard.acks:
            return
        # Taken off at once: a flush in another task meanwhile acks only what came since.
        entries, shard.acks = shard.acks, []
        try:
            await self.ack(shard, entries)
        except BaseException:
            shard.acks[:0] = entries
            raise

    def take_acks(self, shards: Iterable[Shard]) -> Acks:
        """The acks queued on ``shards``, taken off them for a call (see ``_acks``)."""
        return Acks(self._keys, shards, wire(self._link.client))

    def riding(self) -> Acks | None:
        """The acks queued on the owned shards, taken off them to go after the replies
        the reply outbox is writing, in its pipeline (see ``_acks``); None when there
        are none, or on a Redis Cluster (the reply streams are in other slots than
        the shards' keys: the acks go in calls of their own there, see
        :meth:`flush_acks`)."""
        if is_cluster(self._link.client):
            return None
        acks = Acks(self._keys, self._held.shards.values(), wire(self._link.client))
        return acks if acks else None

    async def ack(self, shard: Shard, entries: list[str]) -> None:
        """XACK ``entries`` of ``shard`` now, if its lease is still ours."""
        with redis_errors("XACK"):
            result = await run_script(
                wire(self._link.client),
                _scripts.ACK,
                [self._keys.lease(shard.number), self._keys.stream(shard.number)],
                [shard.lease, CONSUMER_GROUP, *entries],
            )
        if result == -1:
            log.warning("ack_fenced_off", shard=shard.number, entries=len(entries))

    async def settle_erasures(self, within: float) -> None:
        """Trim once more, for at most ``within`` s, the streams erasures left entries
        pending in (the worker stops: see ``Erasure.settle``)."""
        with anyio.move_on_after(within, shield=True):
            await self._erasure.settle()

    async def settle(self, shard: Shard, within: float) -> None:
        """Store ``shard``'s queued commits and flush its acks, for at most ``within`` s
        (what is not stored stays pending, for the next owner)."""
        with anyio.move_on_after(within, shield=True):
            try:
                await self.flush(shard)
                await self.flush_acks(shard)
                await self._unsent.forget_written(shard)
            except TransportError as exc:
                log.warning("commit_or_ack_failed", shard=shard.number, reason=str(exc))


#: What a command that changed nothing stores (with the tells it sent).
_NO_CHANGES: Final = DurableChanges([])


#: Whether the instances of an actor class are durable, by class (see :func:`_durable`).
_DURABLE_CLASSES: dict[type, bool] = {}


def _durable(actor: Actor) -> bool:
    """:func:`is_durable` for ``actor``, looked up once per class when its class
    implements :class:`Durable` (methods of its own instances are checked each time)."""
    kind = type(actor)
    durable = _DURABLE_CLASSES.get(kind)
    if durable is None:
        durable = _DURABLE_CLASSES[kind] = is_durable(kind)
    return durable or is_durable(actor)


def _stores_something(changes: DurableChanges) -> bool:
    """False for a command that changed nothing (a read): it needs no commit, and its
    reply need not wait for one (a NamedTuple is truthy even when empty)."""
    return (
        bool(changes.log_appends)
        or changes.snapshot is not None
        or changes.replace_log
        or changes.erase
        or changes.discarded  # settled by a commit, then its entry deleted
        or changes.due_at is not None
    )


def _handed_tell(env: Envelope) -> bool:
    """True for a tell handed over in memory (no stream entry, no asker)."""
    return isinstance(env, StreamEnvelope) and not env.entry and env.correlation is None


def _take(shard: Shard) -> list[PendingCommit]:
    """Take the next batch off ``shard``'s queue (see :func:`_next_batch`), of the
    queued commits of actors no call in flight holds, and hold its actors."""
    commits = shard.commits
    holding = shard.committing
    if holding:
        free = [p for p in commits if p.envelopes[0].recipient not in holding]
        if not free:
            return []
    elif commits:
        free = commits
    else:
        return []
    batch = _next_batch(free)
    if len(batch) == len(commits):
        commits.clear()
    elif not holding:
        del commits[: len(batch)]
    else:
        taken = set(map(id, batch))
        commits[:] = [p for p in commits if id(p) not in taken]
    holding.update([p.envelopes[0].recipient for p in batch])
    shard.calls += 1
    return batch


def _release(shard: Shard, batch: list[PendingCommit]) -> None:
    """``batch``'s call is over: let go of its actors, and wake whoever waits for it
    (their next commits may be queued)."""
    shard.calls -= 1
    shard.committing.difference_update([p.envelopes[0].recipient for p in batch])
    done, shard.committed = shard.committed, None
    if done is not None:
        done.set()


def _committed_event(shard: Shard) -> anyio.Event:
    """What is set when ``shard``'s next commit call is over (made when first waited
    for: most calls have no one waiting)."""
    event = shard.committed
    if event is None:
        event = shard.committed = anyio.Event()
    return event


def _next_batch(commits: list[PendingCommit]) -> list[PendingCommit]:
    """The queued commits the next call stores: the oldest, up to ``_COMMIT_BATCH``
    commands and about ``_COMMIT_BYTES`` of changes (at least one command)."""
    size = 0
    commands = 0
    for n, pending in enumerate(commits):
        commands += len(pending.envelopes)
        if commands > _COMMIT_BATCH and n > 0:
            return commits[:n]
        changes = pending.changes
        snapshot, appends = changes.snapshot, changes.log_appends
        if snapshot is not None:
            size += len(snapshot)
        if len(appends) == 1:
            size += len(appends[0])
        elif appends:
            size += sum(map(len, appends))
        if size > _COMMIT_BYTES and n > 0:
            return commits[:n]
    return commits[:]
