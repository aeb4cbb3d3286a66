"""Helpers of the hand-over tests: a worker runtime's transport, an actor's shard
stream, and waiting until asks to an actor are handed over in memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actormem.runtime import Runtime
from actormem.runtime.redis import Keys, RedisConfig, RedisTransport, shard_of
from tests.support.actors import Add, GetState
from tests.support.streams import eventually

__all__ = ("handing_over", "redis_transport", "shard_stream", "warmed_ledger")


def redis_transport(rt: Runtime) -> RedisTransport:
    """``rt``'s transport, a :class:`RedisTransport`."""
    transport = rt.transport
    assert isinstance(transport, RedisTransport)
    return transport


def shard_stream(config: RedisConfig, address: str) -> str:
    """The shard stream that carries what is sent to ``address``."""
    return Keys(config.prefix).stream(shard_of(address, config.shards))


def _ledger_warm_up(n: int) -> Any:
    return Add(f"warm{n}")


async def handing_over(
    rt: Runtime, address: str, warm: Callable[[int], Any] = _ledger_warm_up
) -> RedisTransport:
    """Wait until asks to ``address`` are handed over (its shard is owned and read to
    its end, its record held), asking it ``warm(n)`` for the n-th look (a ledger's
    ``Add``, by default); return ``rt``'s transport."""
    transport = redis_transport(rt)
    n = 0

    async def handed() -> bool:
        nonlocal n
        before = transport.stats().handed_over
        n += 1
        await rt.ref(address).ask(warm(n))
        return transport.stats().handed_over > before

    await eventually(handed, f"asks to {address} are handed over", limit=10.0)
    return transport


async def warmed_ledger(rt: Runtime, address: str) -> list[str]:
    """:func:`handing_over` for the ledger ``address``; the tokens its warm-up stored."""
    await handing_over(rt, address)
    return list((await rt.ref(address).ask(GetState())).tokens)
