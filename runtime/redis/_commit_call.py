"""The group commit's calls: what one fenced COMMIT call of a shard sends for a batch
of pending commits (see :mod:`._commits`), and what follows it (the stored state's
expiry and due times)."""

from __future__ import annotations

import time
from itertools import chain
from typing import TYPE_CHECKING, Any, Final

import msgspec
import structlog

from actormem.runtime.errors import TransportError
from actormem.runtime.redis import _scripts
from actormem.runtime.redis._client import redis_errors, run_script
from actormem.runtime.redis._due import DueTimes, latest_due
from actormem.runtime.redis._rounds import rounds
from actormem.runtime.redis._shards import PendingCommit, StreamEnvelope
from actormem.runtime.redis.keys import CONSUMER_GROUP

if TYPE_CHECKING:
    from actormem.runtime._envelope import Envelope
    from actormem.runtime.redis._replies import Replies
    from actormem.runtime.redis._shards import Link, Shard
    from actormem.runtime.redis._unsent import Unsent
    from actormem.runtime.state import DurableChanges

__all__ = ("CommitCalls",)

log = structlog.get_logger("actormem.redis")

#: Seconds a kept reply outlives its ask's deadline.
_REPLY_SLACK: Final = 1.0
#: Packs what describes a commit call's commands and reply writes into one argument.
_ENCODER: Final = msgspec.msgpack.Encoder()
#: No log items.
_NONE: Final[list[bytes]] = []


class CommitCalls:
    """Makes the fenced COMMIT calls of the shards a worker owns.

    Args:
        link: the transport.
        replies: encodes the replies the calls keep and write.
        unsent: the tells not written yet, stored with their commands.
        due: the due times the stored changes set.
    """

    def __init__(self, link: Link, *, replies: Replies, unsent: Unsent, due: DueTimes) -> None:
        self._link = link
        self._config = link.config
        self._keys = link.keys
        self._replies = replies
        self._unsent = unsent
        self.due = due

    async def store(self, shard: Shard, batch: list[PendingCommit]) -> list[int] | None:
        """One fenced call storing ``batch``; its statuses in ``batch`` order, or None
        when fenced off. The commands go grouped by actor (each actor's own in order)."""
        keys, number = self._keys, shard.number
        by_actor: dict[str, list[int]] = {}
        for i, pending in enumerate(batch):
            address = pending.envelopes[0].recipient
            indices = by_actor.get(address)
            if indices is None:
                by_actor[address] = [i]
            else:
                indices.append(i)
        names = [keys.lease(number), keys.stream(number), keys.unsent(number)]
        now = time.time()
        # What describes the commands, nine items each, packed as one argument, and
        # their data (see ``_scripts.COMMIT``).
        described: list[Any] = []
        data: list[Any] = []
        reply_keys: list[str] = []
        # Where each pending commit's commands start among the commands stored.
        head: list[int] = [0] * len(batch)
        slots = 0
        unsent: list[str] = []
        through = 0
        unwritten = self._unsent.unwritten
        # Whether a change sets an expiry or a due time (or may remove one, see
        # :func:`._due.latest_due`): only then does the call pass through :meth:`_expire`.
        expiring = False
        names += keys.actor_states(number, by_actor)
        for indices in by_actor.values():
            if len(indices) == 1:
                described.append(len(batch[indices[0]].envelopes))
            else:
                described.append(sum(len(batch[i].envelopes) for i in indices))
            for i in indices:
                pending = batch[i]
                envelopes = pending.envelopes
                remember = pending.remember
                changes = pending.changes
                if changes.expire_after or changes.due_at is not None or changes.erase:
                    expiring = True
                following = len(envelopes)
                head[i] = slots
                slots += following
                for env in envelopes:
                    following -= 1
                    command = env.id if remember else ""
                    if isinstance(env, StreamEnvelope):
                        entry, sent = env.entry, env.sent
                    else:
                        entry, sent = "", None
                    if following:
                        snapshot, replace, appends = None, False, _NONE
                    else:
                        # The change set goes with the last command of the batch.
                        snapshot, appends = changes.snapshot, changes.log_appends
                        replace = bool(changes.replace_log)
                        if snapshot is not None:
                            data.append(snapshot)
                    kept = self._kept_reply(pending, env) if pending.replies else None
                    if kept is None:
                        ttl = 0  # read only with a reply
                    else:
                        data.append(kept)
                        reply_keys.append(keys.reply(number, env.recipient, env.id))
                        ttl = self._reply_ttl_ms(env, now)
                    data += appends
                    if sent:
                        tells, last = unwritten(env)
                        if tells:
                            data += chain.from_iterable(tells)
                            unsent += (tell for tell, _ in tells)
                            through = max(through, last)
                    else:
                        tells = []
                    described += (
                        following,
                        entry,
                        command,
                        snapshot is not None,
                        replace,
                        kept is not None,
                        ttl,
                        len(appends),
                        len(tells),
                    )
        names += reply_keys
        writes = self._reply_writes(batch, head, names, data)
        args = [shard.lease, CONSUMER_GROUP, f"{now:.6f}", self._config.applied_keep]
        args += (len(by_actor), _ENCODER.encode((described, writes)), *data)
        with redis_errors(f"storing the state of {len(batch)} commands of shard {number}"):
            # (Rounds take the calls run_script makes, as a client or a wire does.)
            calls: Any = rounds(self._link.client)
            result = await run_script(calls, _scripts.COMMIT, names, args)
        if result == -1:
            log.warning("write_fenced_off", shard=number, commands=len(batch))
            return None
        if unsent:
            self._unsent.stored(shard, unsent, through)
        if expiring:
            stored = {a: [batch[n].changes for n in i] for a, i in by_actor.items()}
            await self._expire(number, stored)
        # One status per command, the same for each of a batch: one per pending commit.
        return [int(result[slot]) for slot in head]

    def _reply_writes(
        self, batch: list[PendingCommit], head: list[int], names: list[str], data: list[Any]
    ) -> list[Any]:
        """What describes the replies that the commit call writes to their askers'
        reply streams itself (see ``Replies.stream_of``), as ``_scripts.COMMIT`` takes
        it (empty: none); the streams are appended to ``names``, the replies to
        ``data``. A reply then costs no round trip and no outbox turn of its own after
        the commit, and goes only if its command is stored. Marks them in each pending
        commit's ``written``; the others are sent once it is stored."""
        replies = self._replies
        writes: list[Any] = []
        streams: dict[str, int] = {}
        for i, pending in enumerate(batch):
            if not pending.replies:
                continue  # ``written`` is empty: it has no reply, and never had one
            envelopes = pending.envelopes
            kept = pending.kept_replies or {}
            written: list[int] = []
            for n, (env, reply) in enumerate(pending.replies):
                stream = replies.stream_of(env)
                if stream is None:
                    continue
                index = streams.get(stream)
                if index is None:
                    names.append(stream)
                    index = streams[stream] = len(names)
                # Its command's number among the call's (1 = the first).
                number = head[i] + 1 + (0 if len(envelopes) == 1 else _position(envelopes, env))
                if not writes:
                    field, maxlen, ttl = replies.stream_args()
                    writes += (maxlen, ttl)
                    data.append(field)
                writes += (number, index)
                data.append(kept.get(env.id) or replies.encode(env, reply))
                written.append(n)
            pending.written = frozenset(written)
        return writes

    def _kept_reply(self, pending: PendingCommit, env: Envelope) -> bytes | None:
        """The encoded reply the commit keeps for ``env`` of ``pending`` (an ask with an
        id that was answered, of a command that keeps its reply:
        ``Command.keep_reply``), so that the ask sent again is answered with it; else
        None."""
        keep = getattr(type(env.body), "keep_reply", True)
        if not (keep and env.id and env.correlation is not None and pending.replies):
            return None
        kept = pending.kept_replies
        if kept is None:
            kept = pending.kept_replies = {}
        data = kept.get(env.id)
        if data is None:
            answers = [reply for asked, reply in pending.replies if asked is env]
            if not answers:
                return None
            data = kept[env.id] = self._replies.encode(env, answers[-1])
        return data

    def _reply_ttl_ms(self, env: Envelope, now: float) -> int:
        """How long the reply to ``env`` is kept: until its asker stops waiting (and a
        second more, for clocks a little apart), at most ``reply_ttl_ms``."""
        limit = self._config.reply_ttl_ms
        if env.deadline is None:
            return limit
        return max(1, min(limit, int((env.deadline - now + _REPLY_SLACK) * 1000)))

    async def _expire(self, shard: int, stored: dict[str, list[DurableChanges]]) -> None:
        """Set the expiry of the stored state of the actors whose latest changes ask
        for one (``expire_after``), and the due times the changes set (see
        :mod:`._due`); a failure only leaves the previous ones."""
        keys = self._keys
        expiring = [(a, c[-1].expire_after) for a, c in stored.items() if c[-1].expire_after]
        due = {a: t for a, c in stored.items() if (t := latest_due(c)) is not None}
        if not expiring and not due:
            return
        try:
            with redis_errors("PEXPIRE"):
                async with self._link.client.pipeline(transaction=False) as pipe:
                    for address, seconds in expiring:
                        ms = max(1, round((seconds or 0) * 1000))
                        pipe.pexpire(keys.actor_log(shard, address), ms)
                        pipe.pexpire(keys.actor_snapshot(shard, address), ms)
                        pipe.pexpire(keys.actor_applied(shard, address), ms)
                    if due:
                        self.due.write(pipe, shard, due)
                    await pipe.execute()
        except TransportError as exc:
            log.warning("expiry_not_set", shard=shard, actors=len(expiring), reason=str(exc))


def _position(envelopes: list[Envelope], env: Envelope) -> int:
    """Where ``env`` itself (not an equal envelope) is in ``envelopes``."""
    return next(n for n, other in enumerate(envelopes) if other is env)
