"""Calls of several tasks that go together: those announced for one turn of the event
loop go in one round trip (see :class:`Rounds`)."""

from __future__ import annotations

import weakref
from typing import Any, Final

import anyio
import anyio.lowlevel
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from actormem.runtime.redis._wire import Wire, wire

__all__ = ("Rounds", "rounds")

#: Calls sent in one round, at most.
_ROUND_MOST: Final = 32


class _Round:
    """Calls that go in one pipeline, and their replies once it returned."""

    __slots__ = ("commands", "done", "failure", "replies", "sent")

    def __init__(self, first: tuple[Any, ...]) -> None:
        self.commands = [first]
        self.replies: list[Any] = []
        self.failure: BaseException | None = None
        self.done = anyio.Event()
        #: True once a caller sends it (it takes no more calls).
        self.sent = False


class Rounds:
    """A wire's calls made by several tasks in the same turn of the event loop, sent
    as one pipeline: one write and one read for all of them (the group commits of
    the shards whose handlers ran in one turn, say), not one each.

    A task that is woken to make a call says so beforehand (:meth:`announce`, by
    whoever wakes it) and when it runs (:meth:`arrived`, whether it makes the call
    or not). A call made while announced calls are still to come opens a round:
    it lets the event loop run the tasks that are ready (one turn), which join it,
    then sends it; the last announced call to join sends it at once, without
    waiting for that turn. A call made while none is announced goes at once, on
    its own (or joins a round that is open). Each caller gets its own reply (an
    error reply raises for its call only). A round never spans a Redis Cluster's
    nodes: a Cluster's calls (and those of a client that watches its calls) go one
    by one, as :meth:`Wire.execute_command` sends them.

    A caller cancelled while its round is in flight leaves its call to the round
    (it is sent, or was): as a call cancelled while its reply is awaited, it may
    have run. The task that sends a round finishes it before its own cancellation
    takes effect (the connection's timeout bounds it), so that cancelling one
    caller fails no other.

    Args:
        wire: sends the rounds.
    """

    def __init__(self, wire: Wire) -> None:
        # Weakly: the rounds are kept for as long as their wire is (see :func:`rounds`).
        self._wire = weakref.ref(wire)
        self._open: _Round | None = None
        self._coming = 0

    @property
    def coming(self) -> int:
        """The announced calls whose tasks have not run yet."""
        return self._coming

    def announce(self) -> None:
        """Say that a task was woken to make a call: calls made before it runs wait
        for it (one turn at most)."""
        self._coming += 1

    def arrived(self) -> None:
        """An announced task runs: it makes its call now, or none."""
        self._coming = max(self._coming - 1, 0)

    async def execute_command(self, *args: Any) -> Any:
        """Send ``args`` as one command, with the calls announced for this turn of the
        event loop (see above), and return the server's reply, unparsed.

        Raises:
            redis.exceptions.RedisError: the call failed (a failure of the
                connection fails every call of the round).
        """
        wire = self._sender()
        if not wire.direct:
            return await wire.execute_command(*args)
        round_ = self._open
        if round_ is not None and len(round_.commands) < _ROUND_MOST:
            return await self._joined(wire, round_, args)
        if not self._coming:
            return await wire.execute_command(*args)
        round_ = self._open = _Round(args)
        try:
            with anyio.CancelScope(shield=True):
                await anyio.lowlevel.checkpoint()  # the calls announced join it
        finally:
            if self._open is round_:
                self._open = None
        if round_.sent:
            return await self._answer(round_, 0)
        if len(round_.commands) == 1:
            return await wire.execute_command(*args)  # none joined: no one waits for it
        await self._send(wire, round_)
        return _result(round_.replies[0])

    async def _joined(self, wire: Wire, round_: _Round, args: tuple[Any, ...]) -> Any:
        """``args`` sent with ``round_``: its reply once the round returned. The last
        announced call sends the round."""
        number = len(round_.commands)
        round_.commands.append(args)
        if self._coming:
            return await self._answer(round_, number)
        self._open = None
        await self._send(wire, round_)
        return _result(round_.replies[number])

    async def _send(self, wire: Wire, round_: _Round) -> None:
        """Send ``round_``'s calls as one pipeline (shielded: its other callers wait
        for it)."""
        round_.sent = True
        try:
            with anyio.CancelScope(shield=True):
                round_.replies = await wire.pipeline(round_.commands)
        except BaseException as exc:
            round_.failure = exc
            raise
        finally:
            round_.done.set()

    @staticmethod
    async def _answer(round_: _Round, number: int) -> Any:
        """The reply to call ``number`` of ``round_``, which another caller sends."""
        await round_.done.wait()
        failure = round_.failure
        if failure is not None:
            raise RedisConnectionError(f"the round carrying the call failed: {failure!r}")
        return _result(round_.replies[number])

    async def script_load(self, script: str) -> Any:
        """Load ``script`` into the server's script cache."""
        return await self._sender().script_load(script)

    def _sender(self) -> Wire:
        wire = self._wire()
        if wire is None:
            raise RedisConnectionError("the client of these calls is gone")
        return wire


def _result(reply: Any) -> Any:
    """``reply``, or the error it is raised."""
    if isinstance(reply, Exception):
        raise reply
    return reply


_ROUNDS: weakref.WeakKeyDictionary[Wire, Rounds] = weakref.WeakKeyDictionary()


def rounds(client: aioredis.Redis) -> Rounds:
    """The :class:`Rounds` of ``client``'s :class:`Wire` (see :func:`wire`), made on
    first use and kept for as long as the wire is."""
    kept = wire(client)
    found = _ROUNDS.get(kept)
    if found is None:
        found = _ROUNDS[kept] = Rounds(kept)
    return found
