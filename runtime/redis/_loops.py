"""What the transport's background loops share: waiting for the runtime to open,
reading a stream without a consumer group, for ever, and trimming a consumer
group's stream below what it still needs."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, cast

import anyio

from actormem.runtime.errors import TransportError
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis._retry import forever
from actormem.runtime.redis._wire import wire
from actormem.runtime.redis.keys import CONSUMER_GROUP

if TYPE_CHECKING:
    from actormem.runtime.redis._shards import Link

__all__ = (
    "OPEN_POLL",
    "EntryId",
    "delete_quietly",
    "entry_field",
    "entry_id",
    "stream_end",
    "streams_read",
    "tail",
    "trim_settled",
    "wait_open",
)

#: Entries read per XREAD of a reply or broadcast stream.
_BATCH: Final = 1_000
#: How often a waiting loop looks whether the runtime opened (s).
OPEN_POLL: Final = 0.01

#: An entry's id as ``(milliseconds, sequence)``: ordered as Redis orders them.
EntryId = tuple[int, int]


def entry_id(entry: str | bytes) -> EntryId:
    """``b"1700000000000-3"`` as ``(1700000000000, 3)``."""
    text = entry.decode() if isinstance(entry, bytes) else entry
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


async def trim_settled(client: Any, stream: str) -> EntryId | None:
    """Trim the shard stream ``stream`` below its lowest pending entry (below the
    entry after its last delivered one when none is pending) and return that bound;
    None when the stream or its consumer group does not exist.

    The group's last delivered entry is read before the pending entries: an entry
    delivered in between has a higher id than the one read, so it is never trimmed
    while pending (a worker that dies before settling it leaves it to be claimed
    by the next owner, which must still find it).
    """
    if not await client.exists(stream):
        return None
    groups = await client.xinfo_groups(stream)
    group = next((g for g in groups if g["name"] == CONSUMER_GROUP.encode()), None)
    if group is None:
        return None
    summary = await client.xpending(stream, CONSUMER_GROUP)
    if summary["pending"]:
        bound = entry_id(summary["min"])
    else:
        ms, seq = entry_id(group["last-delivered-id"])
        bound = (ms, seq + 1)
    await client.xtrim(stream, minid=f"{bound[0]}-{bound[1]}", approximate=False)
    return bound


async def wait_open(link: Link) -> None:
    """Return once the runtime is open: entries must not be delivered before the
    user has registered the actor kinds."""
    while not link.host.is_open:  # noqa: ASYNC110 (startup only, no event)
        await anyio.sleep(OPEN_POLL)


async def tail(
    link: Link,
    stream: str,
    last: str,
    field: bytes,
    handle: Callable[[bytes | None], Awaitable[None]],
    *,
    block_ms: int,
    own: bool = False,
    every_second: Callable[[], None] | None = None,
) -> None:
    """Read ``stream`` (no consumer group) after entry ``last`` for ever, handing
    each entry's ``field`` to ``handle``: a client's replies, the broadcasts.

    Args:
        own: the stream is this transport's alone (its replies), so what was read
            is trimmed off before it reads on, in the same round trip as the next
            read, and the stream stays as short as the backlog.
        every_second: called about once a second, between reads.
    """
    # Its own connection, the reply as the server sent it: no pool, retry and
    # redis-py parsing (a dict per entry) for each read.
    reads = wire(link.blocking_client)
    next_tick = time.monotonic() + 1.0
    # Trim below this entry with the next read (what was read and handled).
    trim: str | None = None
    while True:

        async def read(after: str = last, below: str | None = trim) -> Any:
            commands: list[tuple[Any, ...]] = []
            if below is not None:
                commands.append(("XTRIM", stream, "MINID", below))
            commands.append(("XREAD", "COUNT", _BATCH, "BLOCK", block_ms, "STREAMS", stream, after))
            with redis_errors(f"XREAD {stream}"):
                replies = await reads.pipeline(commands)
                for reply in replies:
                    if isinstance(reply, Exception):
                        raise reply
            return replies[-1]

        response = await forever(stream, read)
        trim = None
        read_any = False
        for entries in streams_read(response):
            for entry, fields in entries:
                read_any = True
                last = entry.decode()
                await handle(entry_field(fields, field))
        if own and read_any:
            ms, _, seq = last.partition("-")
            trim = f"{ms}-{int(seq) + 1}"
        if time.monotonic() >= next_tick:
            # Once a second, not per read: with many asks pending, a scan per
            # read batch slowed the reader until replies were trimmed unread.
            next_tick = time.monotonic() + 1.0
            if every_second is not None:
                every_second()


def streams_read(response: Any) -> Any:
    """The entry lists of an XREAD or XREADGROUP reply: parsed by redis-py, or as
    the server sent it."""
    if not response:
        return ()
    if isinstance(response, dict):  # RESP3: {stream: entries}
        return response.values()
    return (entries for _stream, entries in response)


def entry_field(fields: Any, name: bytes) -> bytes | None:
    """The field ``name`` of a stream entry: from the server's flat
    ``[name, value, ...]`` list, or redis-py's dict."""
    if type(fields) is list:
        if len(fields) == 2 and fields[0] == name:  # what every writer writes
            value: bytes = fields[1]  # (no cast: this runs once per entry read)
            return value
        return cast("bytes | None", dict(zip(fields[::2], fields[1::2], strict=False)).get(name))
    return cast("dict[bytes, bytes]", fields).get(name)


async def stream_end(link: Link, stream: str) -> str:
    """The id of the newest entry of ``stream`` (``0-0`` if empty): read after it."""
    with redis_errors(f"reading {stream}"):
        newest: Any = await link.client.xrevrange(stream, count=1)
    return newest[0][0].decode() if newest else "0-0"


async def delete_quietly(link: Link, key: str, what: str) -> None:
    """Delete ``key`` (a stream of this transport's alone, as it closes), within the
    socket timeout and shielded; a failure leaves it to expire. ``what``: for the
    error's message."""
    with anyio.move_on_after(link.config.socket_timeout, shield=True):
        try:
            with redis_errors(f"deleting {what}"):
                await link.client.delete(key)
        except TransportError:
            pass
