"""Dead letters: the entries a worker gives up on, and how it decides to.

An entry goes to the dead-letter stream, with the reason, when it cannot be
decoded, is too large, belongs to another shard, or its handling failed or never
finished ``max_deliveries`` times; then it is acked, and an ask among those is
answered with the error at once instead of timing out. Writing one is
idempotent (an index of what was written), so a worker that dies before the ack
does not write it twice.

Handling that never finished is counted per entry: the runtime reports when it
starts handling a redelivered entry, and the count is forgotten once handling
returns, whatever its outcome.

:func:`requeue_dead_letters` puts dead letters back on their shard streams (the
commands a stopped actor refused during its back-off, say), each with its own
command id, so it is applied once however often it is requeued;
:func:`read_dead_letters` reads them (nothing else) and :func:`drop_dead_letters`
deletes them.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.lowlevel
import msgspec
import structlog

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import (
    HandlerError,
    InvalidAddressError,
    RuntimeClosedError,
    TransportError,
)
from actormem.runtime.ids import split_address
from actormem.runtime.redis import _scripts
from actormem.runtime.redis._client import redis_errors, run_script
from actormem.runtime.redis._shards import StreamEnvelope
from actormem.runtime.redis.keys import Keys, shard_of

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from actormem.runtime.redis._commits import GroupCommit
    from actormem.runtime.redis._replies import Replies
    from actormem.runtime.redis._shards import Link, Shard
    from actormem.runtime.redis.config import RedisConfig

__all__ = (
    "DeadLetter",
    "DeadLetters",
    "count_dead_letters",
    "drop_dead_letters",
    "given_up",
    "is_letter_id",
    "read_dead_letters",
    "requeue_dead_letters",
)

log = structlog.get_logger("actormem.redis")

#: Entries kept in the dead-letter stream, approximately.
_DLQ_MAXLEN: Final = 100_000
#: How long a redelivered entry's attempt counter lives (ms).
_ATTEMPTS_TTL_MS: Final = 24 * 3600 * 1000
#: Deliveries (started or not) after which an entry is dead-lettered anyway: one
#: that kills its worker before handling starts (while its actor loads, say).
_DELIVERY_CAP_FACTOR: Final = 10


class DeadLetters:
    """Writes the entries given up on to the dead-letter stream and counts the
    attempts at handling redelivered ones.

    Args:
        link: the transport, whose id is recorded with each dead letter.
        commits: acks what was dead-lettered.
        replies: answers the asks that will never be handled.
    """

    def __init__(self, link: Link, *, commits: GroupCommit, replies: Replies) -> None:
        self._link = link
        self._config = link.config
        self._keys = link.keys
        self._codec = link.codec
        self._commits = commits
        self._replies = replies
        #: Entries moved to the dead-letter stream.
        self.written = 0
        # Attempt counters of redelivered entries whose handling returned, to delete.
        self._finished: list[str] = []

    async def write(
        self, shard: Shard, entry: str, data: bytes | None, reason: str, *, command: str = ""
    ) -> None:
        """Write ``entry`` to the dead-letter stream (once: a second write, after a worker
        died before the ack, adds nothing), then ack it. A command handed over in
        memory has no entry (``entry`` is empty): it is known by its id,
        ``command``, and there is nothing to ack."""
        stream = self._keys.stream(shard.number)
        fields: list[Any] = [
            b"reason",
            reason,
            b"stream",
            stream,
            b"entry",
            entry,
            b"worker",
            self._link.id,
        ]
        if data is not None:
            fields += [b"e", data]
        with redis_errors("XADD to the dead letters"):
            written = await run_script(
                self._link.client,
                _scripts.DEAD_LETTER,
                [self._keys.dead_letters(), self._keys.dead_letter_index()],
                [f"{stream} {entry or command}", _DLQ_MAXLEN, f"{time.time():.6f}", *fields],
            )
        if entry:
            await self._commits.ack(shard, [entry])
        if written:
            self.written += 1
            log.warning("dead_lettered", stream=stream, entry=entry, reason=reason)
        else:
            log.info("dead_letter_already_written", stream=stream, entry=entry)

    async def write_handled(self, shard: Shard, env: StreamEnvelope, reason: str) -> None:
        """Dead-letter a command whose handling failed (a failure to write leaves it
        pending: delivered again after ``claim_idle_ms``, and dead-lettered then)."""
        fields = {name: getattr(env, name) for name in Envelope.__struct_fields__}
        data = self._codec.encode_envelope(Envelope(**fields))
        try:
            await self.write(shard, env.entry, data, reason, command=env.id)
        except TransportError as exc:
            log.warning("dead_letter_failed", entry=env.entry, reason=str(exc))

    async def answer_asker(self, data: bytes, error_for: Callable[[str], BaseException]) -> None:
        """If ``data`` is an ask that will never be handled, fail it now, not at its timeout.

        Args:
            error_for: makes the error from the address that was asked.
        """
        asker = self._codec.reply_address(data)
        if asker is not None:
            reply_to, correlation, recipient = asker
            bounce = Envelope(recipient=recipient, body=None, reply_to=reply_to)
            await self._replies.reply(bounce, Reply(correlation, error=error_for(recipient)))

    async def poisoned(self, shard: Shard, entry: str, delivered: int) -> str | None:
        """Why a pending entry goes to the dead letters instead of being claimed, if it does.

        A worker reads entries in batches, so one that dies leaves many pending that
        it never started; counting those deliveries would dead-letter innocent commands
        after a few unrelated crashes. What counts is how often handling started and
        never returned: the first delivery (always, as nothing records it), and every
        redelivered attempt that did not finish (:meth:`starting` counts them,
        :meth:`finished` forgets them once one returns). A hard cap on deliveries
        catches an entry that kills its worker before handling starts.
        """
        limit = self._config.max_deliveries
        if delivered >= limit * _DELIVERY_CAP_FACTOR:
            return f"delivered {delivered} times without being handled (max_deliveries={limit})"
        started = 1
        if delivered >= 2 and limit >= 2:
            key = self._keys.attempts(shard.number, entry)
            with redis_errors("GET attempts"):
                started += int(await self._link.client.get(key) or 0)
        if started < limit:
            return None
        return (
            f"handling it started {started} times and never finished "
            f"(delivered {delivered} times; max_deliveries={limit})"
        )

    async def starting(self, env: Envelope) -> None:
        """Handling a redelivered entry starts: count the attempt."""
        if not isinstance(env, StreamEnvelope):
            return
        key = self._keys.attempts(env.shard, env.entry)
        try:
            with redis_errors("INCR attempts"):
                async with self._link.client.pipeline(transaction=True) as pipe:
                    pipe.incr(key)
                    pipe.pexpire(key, _ATTEMPTS_TTL_MS)
                    await pipe.execute()
        except TransportError as exc:
            # Uncounted, the attempt only delays poison detection (the delivery cap holds).
            log.warning("attempt_not_counted", entry=env.entry, reason=str(exc))

    def finished(self, env: StreamEnvelope) -> None:
        """Handling a redelivered entry returned (whatever its outcome): it did not kill
        its worker, so the attempts :meth:`starting` counted are forgotten. What is left
        counted is only handling that never returned: a crash that hit while the entry's
        commit was still queued does not make it a poison pill.

        The counters are deleted in the background, a burst in one pipeline: a worker
        taking over a dead one's backlog must not wait a round trip per entry.
        """
        self._finished.append(self._keys.attempts(env.shard, env.entry))
        if len(self._finished) == 1:
            try:
                self._link.host.spawn(self._forget_attempts)
            except RuntimeClosedError:  # closing: left counted, only dead-lettered sooner
                self._finished.clear()

    async def _forget_attempts(self) -> None:
        await anyio.lowlevel.checkpoint()  # let the rest of a burst gather
        keys, self._finished = self._finished, []
        try:
            with redis_errors("DEL attempts"):
                async with self._link.client.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.delete(key)
                    await pipe.execute()
        except TransportError as exc:
            # Left counted, those entries are only dead-lettered sooner if crashes recur.
            log.warning("attempts_not_cleared", entries=len(keys), reason=str(exc))


def given_up(address: str, *, reason: str) -> BaseException:
    """The error an asker gets for an ask that will never be handled."""
    return HandlerError(address, reason)


class _Command(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A dead letter's envelope as it is requeued: a tell, its body untouched (the
    asker of an ask gave up long ago, so its reply address and deadline go)."""

    recipient: str
    body: msgspec.Raw
    id: str = ""
    sender: str | None = None


#: Dead letters read per XRANGE page.
_PAGE: Final = 500


async def requeue_dead_letters(
    client: aioredis.Redis,
    config: RedisConfig,
    *,
    entries: Collection[str] | None = None,
    recipient: str | None = None,
    reason: str | None = None,
) -> list[str]:
    """Put dead letters back on their shard streams, to be handled like any command.

    Each goes back as a tell with its own command id (one is made from the dead
    letter's entry if it had none), so the worker's exactly-once check skips it if
    it was applied after all, and requeueing the same letter twice applies it once.
    A requeued letter is deleted from the dead-letter stream; one that is not a
    valid envelope for a valid address stays.

    Args:
        client: a client of the deployment's Redis.
        config: the deployment's ``[redis]`` section (prefix and shards).
        entries: requeue only these dead-letter entry ids.
        recipient: requeue only letters for this actor address.
        reason: requeue only letters whose reason contains this text.

    Returns:
        The ids of the dead-letter entries requeued, oldest first.

    Raises:
        TransportError: Redis refused or is unreachable (what was requeued stays so).
    """
    redis: Any = client  # redis-py's stream replies are loosely typed
    keys = Keys(config.prefix)
    stream = keys.dead_letters()
    wanted = set(entries) if entries is not None else None
    requeued: list[str] = []
    start = "-"
    while True:
        with redis_errors(f"XRANGE {stream}"):
            page = await redis.xrange(stream, start, "+", count=_PAGE)
        for raw_id, fields in page:
            letter = raw_id.decode()
            if wanted is not None and letter not in wanted:
                continue
            if reason is not None and reason not in fields.get(b"reason", b"").decode(
                "utf-8", "replace"
            ):
                continue
            command = _requeueable(letter, fields.get(b"e"))
            if command is None or (recipient is not None and command.recipient != recipient):
                continue
            target = keys.stream(shard_of(command.recipient, config.shards))
            with redis_errors(f"requeueing {letter}"):
                await redis.xadd(target, {b"e": msgspec.msgpack.encode(command)})
                await redis.xdel(stream, letter)
            requeued.append(letter)
            log.info("dead_letter_requeued", entry=letter, to=command.recipient, msg_id=command.id)
        if len(page) < _PAGE:
            return requeued
        start = "(" + page[-1][0].decode()


def _requeueable(letter: str, data: bytes | None) -> _Command | None:
    """The command a dead letter holds, ready to requeue; None if it holds none."""
    if data is None:
        return None
    try:
        command = msgspec.msgpack.decode(data, type=_Command)
        split_address(command.recipient)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, InvalidAddressError):
        return None
    if not command.id:
        command.id = hashlib.blake2b(f"dead letter {letter}".encode(), digest_size=16).hexdigest()
    return command


#: A dead letter's id: the dead-letter stream's entry id.
_LETTER_ID: Final = re.compile(r"^[0-9]{1,20}-[0-9]{1,20}$")


def is_letter_id(text: str) -> bool:
    """Whether ``text`` has the shape of a dead letter's id (``1732560000000-0``)."""
    return bool(_LETTER_ID.match(text))


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """One dead letter as it is stored.

    Attributes:
        id: its entry id in the dead-letter stream (its time, in ms, comes first).
        reason: why it was given up on.
        stream: the shard stream it came from.
        entry: its entry id there.
        worker: the worker that gave up on it.
        data: the original envelope as it was read (None if there was none).
    """

    id: str
    reason: str
    stream: str = ""
    entry: str = ""
    worker: str = ""
    data: bytes | None = None

    @property
    def time(self) -> float:
        """When it was dead-lettered (Unix time, s)."""
        return int(self.id.partition("-")[0]) / 1000


def _letter(raw_id: bytes, fields: dict[bytes, bytes]) -> DeadLetter:
    def text(name: bytes) -> str:
        return fields.get(name, b"").decode("utf-8", "replace")

    return DeadLetter(
        id=raw_id.decode(),
        reason=text(b"reason"),
        stream=text(b"stream"),
        entry=text(b"entry"),
        worker=text(b"worker"),
        data=fields.get(b"e"),
    )


async def read_dead_letters(
    client: aioredis.Redis,
    config: RedisConfig,
    *,
    ids: Sequence[str] | None = None,
    limit: int | None = None,
) -> list[DeadLetter]:
    """Read dead letters, oldest first (read-only).

    Args:
        client: a client of the deployment's Redis.
        config: the deployment's ``[redis]`` section (its prefix).
        ids: read only these (those that exist, in the order given; ids that are
            not dead-letter ids are skipped).
        limit: read at most this many (with no ``ids``).

    Raises:
        TransportError: Redis refused or is unreachable.
    """
    redis: Any = client  # redis-py's stream replies are loosely typed
    stream = Keys(config.prefix).dead_letters()
    with redis_errors(f"XRANGE {stream}"):
        if ids is None:
            page = await redis.xrange(stream, "-", "+", count=limit)
            return [_letter(raw_id, fields) for raw_id, fields in page]
        found: list[DeadLetter] = []
        for letter in dict.fromkeys(ids):
            if is_letter_id(letter):
                found += [_letter(r, f) for r, f in await redis.xrange(stream, letter, letter)]
        return found


async def count_dead_letters(client: aioredis.Redis, config: RedisConfig) -> int:
    """How many dead letters there are (read-only).

    Raises:
        TransportError: Redis refused or is unreachable.
    """
    stream = Keys(config.prefix).dead_letters()
    with redis_errors(f"XLEN {stream}"):
        return int(await client.xlen(stream))


async def drop_dead_letters(
    client: aioredis.Redis, config: RedisConfig, ids: Sequence[str]
) -> list[str]:
    """Delete these dead letters; returns the ids of those that existed.

    Raises:
        TransportError: Redis refused or is unreachable (what was deleted stays so).
    """
    stream = Keys(config.prefix).dead_letters()
    dropped: list[str] = []
    for letter in dict.fromkeys(ids):
        if not is_letter_id(letter):
            continue
        with redis_errors(f"XDEL {stream}"):
            if await client.xdel(stream, letter):
                dropped.append(letter)
                log.info("dead_letter_dropped", entry=letter)
    return dropped
