"""Hand-over: asks to an actor whose shard this worker owns, delivered in memory.

An ask made through a worker's own transport to an actor of a shard that worker
owns would travel to Redis and straight back: XADD, XREADGROUP, decode, XACK. It
is handed over instead, into the actor's mailbox, as a :class:`HandedEnvelope`
(decoded from the bytes the stream would carry, so it is validated as a stream
entry is, and shares nothing with the asker's envelope). It is handled like an
entry read from the stream, under the shard's lease: its command id goes into the
actor's applied ids with its group commit, which has no entry to XACK, and its
reply is resolved in memory once that commit stored it.

An ask is handed over only when nothing this transport sent to the same actor
through the stream may still be on its way there (so messages to one actor keep
the order they were sent in): every envelope sent to a shard this worker owns is
noted until the intake reads it, and a shard gained is read to its end, past
what the outbox held when it was gained, before anything to it is handed over.

A handed-over ask is never lost while its asker waits: when its command cannot be
stored (the shard was lost, the commit fenced off), it goes to the shard's stream
with the same command id and correlation, where the shard's owner handles it once
(a command already applied is skipped there, and answered with the reply kept with
it). Otherwise its handling answers it, however long it waits in its actor's
mailbox and whatever its outcome: no copy of it goes through the stream when its
ask's resend delay passes, so should the command fail and be given up
(dead-lettered), its asker is told so and no copy of it is ever handled. One that
dies with its worker dies with its asker, as an ask not yet sent does.

Whatever this transport sends through the stream to an actor that has handed-over
asks not answered yet goes behind copies of those asks (the same command ids,
:meth:`Handover.ahead`): should the shard be lost before they are handled, its next
owner handles them before what was sent after them; where they were handled, the
copies are skipped as the commands in flight or applied they are.

A tell an actor sends to an actor of a shard this worker owns is handed over the
same way, on the same conditions, as a :class:`HandedTell`. A handler's tell is kept
with its command's commit as a tell the outbox has not written is (``_unsent``:
stored in the sender's shard's unsent hash by that commit) until the recipient's
commit stored it, its id among the recipient's applied ids (or it was
dead-lettered); should its worker die before, the next owner of the sender's shard
sends it again from there (or the sender's command, delivered again, does). A
tell sent outside a handler (a piped task's outcome) has no commit to keep it: it
dies with its worker until its recipient's commit stored it, as it would in the
outbox until written. Tells from code outside any actor always go through the
outbox (:meth:`RedisTransport.flush` waits for them). When the recipient's commit
cannot be stored (the shard was lost, the commit fenced off or refused) or the
runtime drops the tell unhandled, it goes to the shard's stream with the same id,
and counts as sent once the outbox wrote it. A tell handed over goes ahead of what
is sent to its recipient through the stream after it, as a handed-over ask does.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

import anyio

from actormem.runtime._envelope import Envelope
from actormem.runtime.errors import ActorError, MailboxFullError, MessageDecodeError
from actormem.runtime.redis._loops import entry_id
from actormem.runtime.redis._shards import StreamEnvelope

if TYPE_CHECKING:
    from collections.abc import Callable

    from actormem.runtime.redis._outbox import Outbox
    from actormem.runtime.redis._shards import Holdings, Link, Shard

__all__ = ("HandedEnvelope", "HandedTell", "Handover", "unsent_order")

#: Handed-over asks noted before the first look for those whose asker gave up.
_PRUNE_FIRST: Final = 1024
#: How long an ask without a deadline whose command was given up is held for its
#: answer, at most (s).
_GIVING_UP_S: Final = 3600.0
#: Tells a handed-over command may send before its order among them could clash
#: with the next handed-over command's (see :func:`unsent_order`).
_RANK_SHIFT: Final = 20


class HandedEnvelope(StreamEnvelope, kw_only=True):
    """An ask handed over in memory (see the module docstring): no stream entry
    (``entry`` is empty), so nothing to ack.

    Attributes:
        after: the last entry of its shard read before it was handed over.
        rank: its place among the commands handed over since that entry was read.
    """

    after: str = "0-0"
    rank: int = 0


def unsent_order(command: StreamEnvelope) -> tuple[str, int]:
    """Where the tells of ``command`` go among the shard's unsent tells (see
    ``_unsent``): its entry and the place of its first tell. A handed-over command
    has no entry: its tells go after those of the last entry read before it, and of
    the commands handed over before it since, as it was handled."""
    if command.entry or not isinstance(command, HandedEnvelope):
        return command.entry, 0
    return command.after, command.rank << _RANK_SHIFT


class HandedTell:
    """A tell an actor sent, handed over in memory (see the module docstring), until
    it is *done*: stored by its recipient's commit, or, sent through the stream after
    all, written by the outbox.

    Args:
        envelope: the sender's envelope.
        item: the outbox item it would have been (stream, data, deadline).
        shard: its recipient's shard.

    Attributes:
        stored: its recipient's commit stored it (or it was dead-lettered).
        position: its outbox position once sent through the stream (0: not sent).
    """

    __slots__ = ("_event", "envelope", "item", "position", "shard", "stored")

    def __init__(self, envelope: Envelope, item: tuple[str, bytes, float], shard: int) -> None:
        self.envelope = envelope
        self.item = item
        self.shard = shard
        self.stored = False
        self.position = 0
        self._event: anyio.Event | None = None

    def done(self, finished: int) -> bool:
        """True once stored, or written by an outbox that finished ``finished`` entries."""
        return self.stored or 0 < self.position <= finished

    def settle(self, *, stored: bool = False, position: int = 0) -> None:
        """It was stored (``stored``), or queued in the outbox at ``position``."""
        self.stored = self.stored or stored
        self.position = self.position or position
        if self._event is not None:
            self._event.set()

    async def wait(self, outbox: Outbox) -> None:
        """Wait until it is done (see :meth:`done`)."""
        while not (self.stored or self.position):
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        if not self.stored:
            await outbox.written(self.position)


class _Track:
    """What this worker sent to one shard it owns through the stream and has not
    read back yet, and how far it has read the shard."""

    __slots__ = ("after", "armed", "caught_up", "rank", "shard", "transit", "written_by")

    def __init__(self, shard: Shard, written_by: int) -> None:
        self.shard = shard
        # Sent through the stream, not read yet: recipient -> {command id: deadline}.
        self.transit: dict[str, dict[str, float]] = {}
        # The outbox position of the last envelope queued before the shard was
        # gained: sent before then, not noted in transit.
        self.written_by = written_by
        # The outbox wrote through written_by when a read returned (armed); a read
        # that found the stream's end since makes the shard caught up.
        self.armed = False
        self.caught_up = False
        self.after = "0-0"
        self.rank = 0


class Handover:
    """Hands asks over to the actors of the shards this worker owns (see the module
    docstring).

    Args:
        link: the transport.
        held: the shards and actors this worker holds.
        own_stream: the transport's reply stream (its asks' ``reply_to``).
        lease_fresh: whether this worker's lease on a shard was recently renewed.
        written: how many entries the transport's outbox has taken off its queue.
        queued: how many entries were ever queued in that outbox.
        streams: the shards' stream names, by shard number.

    Attributes:
        handed_over: asks handed over since the transport opened.
        failed_back: of those, the ones sent through the stream after all.
        tells_handed_over: tells handed over since the transport opened.
        tells_failed_back: of those, the ones sent through the stream after all.
    """

    def __init__(
        self,
        link: Link,
        *,
        held: Holdings,
        own_stream: str,
        lease_fresh: Callable[[int], bool],
        written: Callable[[], int],
        queued: Callable[[], int],
        streams: list[str],
    ) -> None:
        self._link = link
        self._codec = link.codec
        self._held = held
        self._own_stream = own_stream
        self._lease_fresh = lease_fresh
        self._written = written
        self._queued = queued
        self._numbers = {stream: number for number, stream in enumerate(streams)}
        self._tracks: dict[int, _Track] = {}
        # The asks handed over and not answered yet: correlation -> (the asker's
        # envelope, its shard).
        self._handed: dict[int, tuple[Envelope, int]] = {}
        # The tells handed over and not done yet: tell id -> its record.
        self.tells: dict[str, HandedTell] = {}
        # Of those asks and tells, the ones no copy of went through the stream yet, by
        # recipient, in the order they were handed over: correlation (an ask) or tell
        # id (a tell) -> None.
        self._uncopied: dict[str, dict[int | str, None]] = {}
        # How many may be noted before those whose asker gave up are forgotten.
        self._prune_at = _PRUNE_FIRST
        # The asks handed over whose command was given up, until their asker is told
        # so (see :meth:`giving_up`): correlation -> the ask's deadline (wall clock).
        self._giving_up: dict[int, float] = {}
        self.handed_over = 0
        self.failed_back = 0
        self.tells_handed_over = 0
        self.tells_failed_back = 0

    # -- the shards ------------------------------------------------------------------------

    def gained(self, shard: Shard) -> None:
        """This worker owns ``shard`` from now: note what goes to it through the stream."""
        self._tracks[shard.number] = _Track(shard, self._queued())

    def read(self, shard: Shard, entries: list[tuple[str, Any, Any]], complete: bool) -> None:
        """The intake delivered ``entries`` (entry id, data, decoded envelope or error)
        of ``shard``, in stream order; ``complete``: the read reached the stream's end."""
        track = self._tracks.get(shard.number)
        if track is None or track.shard is not shard:
            return
        if entries:
            transit = track.transit
            if transit:
                for _, _, env in entries:
                    if isinstance(env, Envelope):
                        sent = transit.get(env.recipient)
                        if sent is not None and sent.pop(env.id, None) is not None and not sent:
                            del transit[env.recipient]
            last = entries[-1][0]
            if entry_id(last) > entry_id(track.after):
                # Entries claimed from the pending list may be older than those read.
                track.after, track.rank = last, 0
        if complete and not track.caught_up:
            if track.armed:
                track.caught_up = True
            elif self._written() >= track.written_by:
                track.armed = True

    def sent(self, envelope: Envelope, number: int, deadline: float) -> None:
        """``envelope`` goes to shard ``number``'s stream: nothing to its recipient is
        handed over until the intake read it (or, once ``deadline`` passed, dropped it)."""
        self._note(envelope.recipient, envelope.id, number, deadline)

    def sent_again(self, tell: str, item: tuple[str, bytes, float]) -> None:
        """A tell an earlier owner of a shard stored unsent goes to its stream again
        (``item``: stream, data, deadline; see ``_unsent``): as :meth:`sent`."""
        stream, data, deadline = item
        number = self._numbers.get(stream)
        recipient = self._codec.recipient(data)
        if number is not None and recipient is not None:
            self._note(recipient, tell, number, deadline)

    def _note(self, recipient: str, command: str, number: int, deadline: float) -> None:
        track = self._tracks.get(number)
        if track is not None and self._held.shards.get(number) is track.shard:
            sent = track.transit.get(recipient)
            if sent is None:
                track.transit[recipient] = {command: deadline}
            else:
                sent[command] = deadline

    def lost(self, numbers: list[int]) -> tuple[list[Envelope], list[HandedTell]]:
        """This worker lost (or gave back) the shards ``numbers``: forget them, and
        return the asks handed over to their actors that are not answered yet and the
        tells handed over to them that are not stored (to be sent through the stream)."""
        for number in numbers:
            self._tracks.pop(number, None)
        lost = set(numbers)
        back = [c for c, (_, number) in self._handed.items() if number in lost]
        asks = [env for env in map(self.take_back, back) if env is not None]
        told = [tell for tell, handed in self.tells.items() if handed.shard in lost]
        return asks, [tell for tell in map(self.take_back_tell, told) if tell is not None]

    # -- the asks ----------------------------------------------------------------------------

    def take(self, envelope: Envelope, data: bytes, number: int) -> bool:
        """Hand ``envelope`` (an ask, encoded as ``data``, to shard ``number``) over to
        its actor now, if it may be (see the module docstring); False if it goes
        through the stream. A copy sent again (``resent``) always does: the shard's
        owner only ever answers or skips it."""
        if envelope.correlation is None or envelope.reply_to != self._own_stream or envelope.resent:
            return False
        if not self._hand(envelope, data, number):
            return False
        if len(self._handed) >= self._prune_at:
            self._forget_given_up()
        self._handed[envelope.correlation] = (envelope, number)
        self._uncopied.setdefault(envelope.recipient, {})[envelope.correlation] = None
        self.handed_over += 1
        return True

    def take_tell(
        self, envelope: Envelope, item: tuple[str, bytes, float], number: int
    ) -> HandedTell | None:
        """Hand ``envelope`` (a tell an actor sends, queued as ``item`` otherwise, to
        shard ``number``) over to its actor now, if it may be (see the module
        docstring); None if it goes through the stream."""
        if envelope.correlation is not None or not self._hand(envelope, item[1], number):
            return None
        handed = self.tells[envelope.id] = HandedTell(envelope, item, number)
        self._uncopied.setdefault(envelope.recipient, {})[envelope.id] = None
        self.tells_handed_over += 1
        return handed

    def _hand(self, envelope: Envelope, data: bytes, number: int) -> bool:
        """Deliver ``envelope`` (encoded as ``data``) to its actor on shard ``number``
        as a :class:`HandedEnvelope`, if nothing stands in the way (see the module
        docstring)."""
        track = self._tracks.get(number)
        shard = self._held.shards.get(number)
        if track is None or shard is None or track.shard is not shard or not track.caught_up:
            return False
        recipient = envelope.recipient
        record = self._held.actors.get(recipient)
        if record is None or record.shard != number or record.lease not in ("", shard.lease):
            return False
        if track.transit and not _clear(track.transit, recipient):
            return False
        if not self._lease_fresh(number) or envelope.id in record.applied:
            return False
        host = self._link.host
        if not host.is_open or envelope.id in record.inflight:
            return False
        track.rank += 1
        try:
            handed = self._codec.decode_envelope(
                data,
                HandedEnvelope,
                shard=number,
                lease=shard.lease,
                after=track.after,
                rank=track.rank,
            )
        except MessageDecodeError:
            return False  # the intake refuses it, as from any other sender
        try:
            host.deliver_nowait(handed)
        except (MailboxFullError, ActorError):
            return False  # it waits, or is refused, as a stream entry would be
        record.inflight.add(handed.id)
        record.busy += 1
        record.last_used = time.monotonic()
        return True

    def ahead(self, envelope: Envelope) -> list[Envelope]:
        """What goes through the stream ahead of ``envelope`` to its recipient (see the
        module docstring): the asks and tells handed over to it, not answered (stored)
        yet and not copied to the stream yet, oldest first. When ``envelope`` was
        handed over itself and goes through the stream after all, only those handed
        over before it: those after it stay behind it. They stay handed over:
        whichever reply comes first answers an ask, and a tell is done once its
        handed-over copy is stored (its copies are skipped)."""
        recipient = envelope.recipient
        uncopied = self._uncopied.get(recipient) if self._uncopied else None
        if not uncopied:
            return []
        correlation = envelope.correlation
        key = envelope.id if correlation is None else correlation
        if key in uncopied:
            keys = list(uncopied)
            before = keys[: keys.index(key)]
            for taken in (*before, key):
                del uncopied[taken]
            if not uncopied:
                del self._uncopied[recipient]
        else:
            before = list(uncopied)
            del self._uncopied[recipient]
        handed, tells = self._handed, self.tells
        ahead: list[Envelope] = []
        for taken in before:
            if type(taken) is str:
                tell = tells.get(taken)
                if tell is not None:
                    ahead.append(tell.envelope)
            elif taken in handed:
                ahead.append(handed[taken][0])
        return ahead

    def _forget_given_up(self) -> None:
        """Forget the asks whose deadline passed (their askers stopped waiting; one
        shed unhandled gets no reply), so that what is noted stays bounded."""
        now = time.time()
        handed = self._handed
        for correlation in [c for c, (env, _) in handed.items() if (env.deadline or now) < now]:
            self._uncopy(handed.pop(correlation)[0])
        self._prune_at = max(_PRUNE_FIRST, 2 * len(handed))

    def answered(self, correlation: int) -> None:
        """The reply to the ask ``correlation`` came: it needs no stream any more."""
        if self._handed:
            found = self._handed.pop(correlation, None)
            if found is not None:
                self._uncopy(found[0])
        if self._giving_up:
            self._giving_up.pop(correlation, None)

    def giving_up(self, correlation: int, deadline: float | None) -> None:
        """The command of the handed-over ask ``correlation`` is given up, and its
        asker is about to be told so (after the dead letter is written): no copy of it
        goes ahead of anything through the stream, and none is sent again meanwhile
        (:meth:`holds` stays true until :meth:`answered`, or ``deadline``)."""
        self.answered(correlation)
        giving_up = self._giving_up
        if len(giving_up) >= _PRUNE_FIRST:
            now = time.time()
            for stale in [c for c, until in giving_up.items() if until < now]:
                del giving_up[stale]
        giving_up[correlation] = time.time() + _GIVING_UP_S if deadline is None else deadline

    def take_back(self, correlation: int | None) -> Envelope | None:
        """The asker's envelope of the handed-over ask ``correlation`` not answered yet,
        no longer counted as handed over (the caller sends it through the stream, see
        :meth:`ahead`); None for any other ask."""
        if correlation is None:
            return None
        found = self._handed.pop(correlation, None)
        if found is None:
            return None
        # Still among the uncopied: it goes through the stream behind those handed
        # over before it, and ahead of those after it (see :meth:`ahead`).
        return found[0]

    def holds(self, correlation: int | None) -> bool:
        """Whether the ask ``correlation`` is handed over and not answered yet: its
        actor's handling answers it (see the module docstring)."""
        return correlation is not None and (
            correlation in self._handed or correlation in self._giving_up
        )

    def _uncopy(self, envelope: Envelope) -> None:
        """``envelope`` (a handed-over ask or tell) is no longer handed over: no copy
        of it need go ahead of anything."""
        uncopied = self._uncopied.get(envelope.recipient)
        if uncopied is not None:
            correlation = envelope.correlation
            uncopied.pop(envelope.id if correlation is None else correlation, None)
            if not uncopied:
                del self._uncopied[envelope.recipient]

    def stored_tell(self, tell: str) -> None:
        """The handed-over tell ``tell`` (its id) was stored by its recipient's commit,
        or dead-lettered: it is done."""
        handed = self.tells.pop(tell, None)
        if handed is not None:
            self._uncopy(handed.envelope)
            handed.settle(stored=True)

    def take_back_tell(self, tell: str) -> HandedTell | None:
        """The handed-over tell ``tell`` (its id) if it is not done, no longer counted
        as handed over (the caller sends it through the stream and settles it with its
        outbox position); None for any other."""
        handed = self.tells.pop(tell, None)
        if handed is not None:
            self.tells_failed_back += 1  # still among the uncopied, as a taken-back ask
        return handed

    def clear(self) -> None:
        """Forget every shard and ask (the transport closed)."""
        self._tracks.clear()
        self._handed.clear()
        self.tells.clear()
        self._uncopied.clear()


def _clear(transit: dict[str, dict[str, float]], recipient: str) -> bool:
    """True when nothing sent to ``recipient`` is on its way, forgetting what was sent
    to it whose deadline passed (the outbox dropped it unsent, or the recipient's
    runtime sheds it unhandled)."""
    sent = transit.get(recipient)
    if not sent:
        return True
    now = time.time()
    for command, deadline in list(sent.items()):
        if deadline < now:
            del sent[command]
    if sent:
        return False
    del transit[recipient]
    return True
