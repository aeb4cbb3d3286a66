"""A client's hot calls (group commits, acks, shard reads) over connections kept
out of its pool (see :class:`Wire`)."""

from __future__ import annotations

import weakref
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

__all__ = ("Wire", "wire")


class Wire:
    """The hot calls of one client (group commits, acks, shard reads) over
    connections kept out of its pool.

    A call through the client takes a connection from the pool and gives it back,
    through the pool's lock and timeout and a retry wrapper: tens of microseconds of
    Python per call, paid by every group commit and every read. A wire takes up to
    ``limit`` connections from the pool, once each, and keeps them: a call has one
    to itself for its command and its reply (see :meth:`execute_command`). Calls
    beyond ``limit`` at once go through the client, as does every call of a Cluster
    client and of a client whose ``execute_command`` is its own (one that watches or
    changes the calls it makes).

    The connections stay the pool's (it counts them as in use, and closes them when
    the client closes); :meth:`aclose` gives them back.

    Args:
        client: the client whose pool lends the connections.
        limit: the most connections kept.
    """

    def __init__(self, client: aioredis.Redis, limit: int) -> None:
        self.client: Any = client
        self._limit = max(1, limit)
        self._idle: list[Any] = []
        self._kept: list[Any] = []
        # A Cluster client is typed as a Redis one (see ``_client.connect``).
        given: object = client
        self._direct = (
            not isinstance(given, RedisCluster)
            and type(client).execute_command is aioredis.Redis.execute_command
        )

    async def execute_command(self, *args: Any) -> Any:
        """Send ``args`` as one command and return the server's reply, unparsed.

        A failure leaves the connection closed (redis-py closes it on anything but
        an error reply, a cancellation included: its reply may still come), and its
        next call connects again; nothing is retried here (the transport's loops
        retry, and every call they make may be made again).

        Raises:
            redis.exceptions.RedisError: the call failed.
        """
        conn = await self._take()
        if conn is None:
            return await self.client.execute_command(*args)
        try:
            await conn.send_packed_command(conn.pack_command(*args))
            return await conn.read_response()
        finally:
            self._idle.append(conn)

    async def pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Send ``commands`` at once and return their replies, in order, unparsed: one
        round trip (the server runs them in order), on one connection.

        An error reply comes back as its exception (the replies after it are read
        too); a failure of the connection raises, as :meth:`execute_command`.

        Raises:
            redis.exceptions.RedisError: the connection failed (the commands may
                have run, some or all).
        """
        conn = await self._take()
        if conn is None:
            async with self.client.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                return list(await pipe.execute(raise_on_error=False))
        try:
            await conn.send_packed_command(conn.pack_commands(commands))
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(await conn.read_response())
                except ResponseError as exc:  # an error reply: the connection is sound
                    replies.append(exc)
            return replies
        finally:
            self._idle.append(conn)

    async def _take(self) -> Any:
        """A kept connection no call is using (one more taken from the pool while
        fewer than ``limit`` are kept), or None: the call goes through the client."""
        if self._idle:
            return self._idle.pop()
        if self._direct and len(self._kept) < self._limit:
            conn = await self.client.connection_pool.get_connection()
            self._kept.append(conn)
            return conn
        return None

    async def script_load(self, script: str) -> Any:
        """Load ``script`` into the server's script cache."""
        return await self.client.script_load(script)

    @property
    def direct(self) -> bool:
        """True when its calls may go over the connections it keeps (not through the
        client: see above)."""
        return self._direct

    async def aclose(self) -> None:
        """Give the kept connections back to the pool (none may be in a call)."""
        kept, self._kept, self._idle = self._kept, [], []
        for conn in kept:
            await self.client.connection_pool.release(conn)


_WIRES: weakref.WeakKeyDictionary[aioredis.Redis, Wire] = weakref.WeakKeyDictionary()


def wire(client: aioredis.Redis, limit: int | None = None) -> Wire:
    """The :class:`Wire` of ``client``, made on first use (kept for as long as the
    client is) with ``limit``: by default half its pool's bound."""
    found = _WIRES.get(client)
    if found is None:
        if limit is None:
            # (A Cluster client has pools per node, and no wire connections.)
            pool = getattr(client, "connection_pool", None)
            limit = getattr(pool, "max_connections", 2) // 2
        found = _WIRES[client] = Wire(client, limit)
    return found
