"""Erasure: removing what was sent to or by an actor from the streams and dead letters.

When an actor's stored state says it erased what it held
(:attr:`~actormem.runtime.state.DurableChanges.erase`: a forgotten agent, a wiped
history), the copies the transport keeps of its commands go too:

* every shard stream is trimmed below its lowest pending entry (exactly the
  entries its consumer group handled and acked, whoever they were for: what
  trimming past ``stream_maxlen`` removes anyway), so the commands the actor
  sent to others (a compression request, say) go, as the envelopes do not always
  name their sender;
* its own entries in its shard stream before the erasing command: handled, and
  their effects stored already (the caller waits for that), are deleted (XDEL);
* the dead letters addressed to it or sent by it are deleted;
* the replies kept for its applied commands (``Keys.reply``, found by the ids in
  its applied set) are deleted.

A change that erased what messages sent before it may quote
(``DurableChanges.trim_streams``: a pool forgetting a source's insights) trims
every shard stream the same way, now and once the entries it holds then are acked.

A command its actor discarded (``DurableChanges.discarded``: a compression result
that came after an erasure, say) has its own entry deleted once its commit acked it.

Entries still pending then (a command to another actor in flight, or handled and
not acked yet) are waited for in the background: each such stream is trimmed
again once the entries pending at the erasure are acked (for at most
``_SETTLE_WAIT_S``), and once more when the worker stops, after its last acks. An
erasure is rare, and every stream it scans is bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
import structlog

from actormem.runtime.errors import TransportError
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis._loops import EntryId, entry_id, trim_settled
from actormem.runtime.redis._shards import StreamEnvelope

if TYPE_CHECKING:
    from actormem.runtime.redis._shards import Link, PendingCommit

__all__ = ("Erasure",)

log = structlog.get_logger("actormem.redis")

#: Entries read per XRANGE page.
_PAGE: Final = 500
#: How long the background pass waits for the entries pending at an erasure.
_SETTLE_WAIT_S: Final = 60.0


class _Parties(msgspec.Struct):
    """Who an encoded envelope is to and from (its other fields are skipped)."""

    recipient: str = ""
    sender: str | None = None


_parties = msgspec.msgpack.Decoder(_Parties)


def _involves(data: bytes | None, address: str) -> tuple[bool, bool]:
    """``(to it, from it)`` for an encoded envelope; an unreadable one is neither."""
    if data is None:
        return False, False
    try:
        parties = _parties.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return False, False
    return parties.recipient == address, parties.sender == address


class Erasure:
    """Removes an actor's entries from the shard streams and the dead letters.

    Args:
        link: the transport.
    """

    def __init__(self, link: Link) -> None:
        self._link = link
        self._config = link.config
        self._keys = link.keys
        # The streams an erasure left entries pending in, with the cutoff to reach.
        self._unsettled: dict[str, EntryId] = {}

    async def erase(self, address: str, shard: int, before: str) -> int:
        """Remove what was sent to or by ``address`` (on ``shard``) up to its entry
        ``before`` (the erasing command, kept); return how many entries went.

        Raises:
            TransportError: Redis is away or failed (what was removed stays removed;
                erasing again removes the rest).
        """
        removed = 0
        unsettled: dict[str, EntryId] = {}
        cutoff = entry_id(before)
        for number in range(self._config.shards):
            stream = self._keys.stream(number)
            with redis_errors(f"erasing {address} from {stream}"):
                settled = await trim_settled(self._link.client, stream)
                if settled is not None and settled < cutoff:
                    unsettled[stream] = cutoff
                if number == shard:
                    own = await self._find(stream, address, settled or (0, 0), entry_id(before))
                    removed += await self._delete(stream, own)
        with redis_errors(f"erasing the replies kept for {address}"):
            removed += await self._delete_replies(address, shard)
        dead_letters = self._keys.dead_letters()
        with redis_errors(f"erasing {address} from {dead_letters}"):
            found = await self._find(dead_letters, address, (0, 0), None, senders=True)
            removed += await self._delete(dead_letters, found)
        if removed:
            log.info("actor_entries_erased", actor=address, entries=removed)
        if unsettled:
            self._wait_settled(unsettled)
        return removed

    async def trim_sent(self) -> None:
        """Drop what the shard streams keep of every message sent so far: trim each
        below what is settled now, and again, in the background, once the entries
        it holds now are acked (see ``DurableChanges.trim_streams``).

        Raises:
            TransportError: Redis is away or failed (erasing again trims the rest).
        """
        # What this process queued before (a delivery its actor told) is in Redis first.
        with anyio.move_on_after(self._config.retry_for):
            await self._link.flush()
        client: Any = self._link.client
        unsettled: dict[str, EntryId] = {}
        for number in range(self._config.shards):
            stream = self._keys.stream(number)
            with redis_errors(f"trimming {stream}"):
                newest = await client.xrevrange(stream, count=1)
                settled = await trim_settled(self._link.client, stream)
            if newest and settled is not None:
                ms, seq = entry_id(newest[0][0])
                if settled <= (ms, seq):
                    unsettled[stream] = (ms, seq + 1)
        if unsettled:
            self._wait_settled(unsettled)

    async def delete_discarded(self, shard: int, batch: list[PendingCommit]) -> None:
        """Delete the entries of the commands of ``batch`` (just stored and acked) whose
        actor discarded them; a failure leaves them to the stream's trimming."""
        entries = [
            env.entry
            for p in batch
            if p.changes.discarded
            for env in p.envelopes
            if isinstance(env, StreamEnvelope) and env.entry  # handed over: none
        ]
        if not entries:
            return
        stream = self._keys.stream(shard)
        try:
            with redis_errors(f"deleting discarded entries of {stream}"):
                await self._delete(stream, entries)
        except TransportError as exc:
            log.warning("discarded_entries_kept", stream=stream, reason=str(exc))

    def _wait_settled(self, streams: dict[str, EntryId]) -> None:
        """Trim each of ``streams`` again once no entry before its cutoff is pending
        (in the background; and in :meth:`settle`, if the worker stops first)."""
        for stream, cutoff in streams.items():
            self._unsettled[stream] = max(cutoff, self._unsettled.get(stream, cutoff))
        self._link.host.spawn(self._trim_when_settled, streams)

    async def settle(self) -> None:
        """Trim once more the streams an erasure left entries pending in: the worker
        stops, and has acked what it handled (a failure leaves them to the streams'
        own trimming)."""
        unsettled, self._unsettled = self._unsettled, {}
        for stream in unsettled:
            try:
                with redis_errors(f"trimming {stream} after an erasure"):
                    await trim_settled(self._link.client, stream)
            except TransportError as exc:
                log.warning("erase_trim_failed", stream=stream, reason=str(exc))

    async def _trim_when_settled(self, streams: dict[str, EntryId]) -> None:
        """Trim each of ``streams`` again once no entry before its cutoff is pending."""
        waiting = dict(streams)
        with anyio.move_on_after(_SETTLE_WAIT_S):
            while waiting:
                await anyio.sleep(self._config.block_ms / 1000)
                for stream, cutoff in list(waiting.items()):
                    try:
                        with redis_errors(f"trimming {stream} after an erasure"):
                            settled = await trim_settled(self._link.client, stream)
                    except TransportError as exc:
                        log.warning("erase_trim_failed", stream=stream, reason=str(exc))
                        continue
                    if settled is None or settled >= cutoff:
                        del waiting[stream]
                        if self._unsettled.get(stream, cutoff) <= cutoff:
                            self._unsettled.pop(stream, None)
        if waiting:
            log.info("erase_left_pending", streams=len(waiting))

    async def _find(
        self,
        stream: str,
        address: str,
        start: EntryId,
        until: EntryId | None,
        *,
        senders: bool = False,
    ) -> list[bytes]:
        """The entries of ``stream`` from ``start`` and before ``until`` addressed to
        ``address`` (or, with ``senders``, sent by it)."""
        client: Any = self._link.client
        found: list[bytes] = []
        first = f"{start[0]}-{start[1]}"
        while True:
            page = await client.xrange(stream, first, "+", count=_PAGE)
            for entry, fields in page:
                if until is not None and entry_id(entry) >= until:
                    return found
                to_it, from_it = _involves(fields.get(b"e"), address)
                if to_it or (senders and from_it):
                    found.append(entry)
            if len(page) < _PAGE:
                return found
            first = "(" + page[-1][0].decode()

    async def _delete_replies(self, address: str, shard: int) -> int:
        """Delete the replies kept for the commands ``address`` applied."""
        client: Any = self._link.client
        keys = self._keys
        ids = await client.zrange(keys.actor_applied(shard, address), 0, -1)
        doomed = [keys.reply(shard, address, i.decode()) for i in ids]
        gone = 0
        for i in range(0, len(doomed), _PAGE):
            gone += int(await client.delete(*doomed[i : i + _PAGE]))
        return gone

    async def _delete(self, stream: str, entries: Sequence[str | bytes]) -> int:
        client: Any = self._link.client
        for i in range(0, len(entries), _PAGE):
            await client.xdel(stream, *entries[i : i + _PAGE])
        return len(entries)
