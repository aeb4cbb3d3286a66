"""Per-agent expiry (``retention.ttl``): an agent idle past it is forgotten."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
import pytest
from structlog.testing import capture_logs

from actormem.actors import AppConfig, MemoryRuntime, Message
from actormem.actors.memory.actor import memory_factory
from actormem.actors.memory.commands import Add, Expire
from actormem.actors.retention import RetentionConfig
from actormem.runtime import ActorContext, Transport
from actormem.runtime.redis import RedisConfig, connect
from actormem.runtime.redis.keys import Keys, shard_of
from tests.actors.memory.stored import StoredState
from tests.support.redis import keys_holding
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio

CANARY = "ttl-canary-8812"


def with_ttl(ttl: float) -> AppConfig:
    return AppConfig(retention=RetentionConfig(ttl=ttl))


async def test_an_agent_idle_past_its_ttl_is_forgotten(
    request: pytest.FixtureRequest, make_transport: Callable[[], Transport]
) -> None:
    redis = request.node.callspec.params["make_transport"] == "redis"
    config: RedisConfig | None = request.getfixturevalue("redis_config") if redis else None
    with capture_logs() as logs:
        async with MemoryRuntime(with_ttl(0.3), transport=make_transport()) as rt:
            ana = rt.memory("ana")
            await ana.add({"role": "user", "content": f"my locker code is {CANARY}"})
            await ana.record({"role": "user", "content": f"remember {CANARY}"})
            with anyio.fail_after(20):  # the sweeper's Expire, a few TTLs at most
                while not any(e["event"] == "memory_forgotten" for e in logs):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            if config is not None:  # its stream entries too: the erasure, not only key expiry
                client = connect(config)
                try:
                    with anyio.fail_after(20):  # the forget's commit follows its log line
                        while await keys_holding(client, config.prefix, CANARY.encode()):  # noqa: ASYNC110
                            await anyio.sleep(0.05)
                finally:
                    await client.aclose()
            stats = await ana.stats()  # a later command finds it empty
            assert (stats.history_size, stats.longterm_entries) == (0, 0)
    assert any(e["event"] == "memory_expired" and e["agent"] == "ana" for e in logs)


async def test_an_active_agent_does_not_expire(make_transport: Callable[[], Transport]) -> None:
    async with MemoryRuntime(with_ttl(3600), transport=make_transport()) as rt:
        ana = rt.memory("ana")
        await ana.add({"role": "user", "content": "still here"})
        assert await rt.ask("memory/ana", Expire()) is False
        assert (await ana.stats()).history_size == 1


async def test_without_a_ttl_nothing_expires(make_transport: Callable[[], Transport]) -> None:
    async with MemoryRuntime(AppConfig(), transport=make_transport()) as rt:
        ana = rt.memory("ana")
        await ana.add({"role": "user", "content": "kept"})
        assert await rt.ask("memory/ana", Expire()) is False
        assert (await ana.stats()).history_size == 1


async def test_the_stored_state_expires_with_no_worker_left(
    redis_config: RedisConfig, make_redis_transport: Callable[[], Transport]
) -> None:
    ttl = 0.5
    async with MemoryRuntime(with_ttl(ttl), transport=make_redis_transport()) as rt:
        await rt.memory("ana").add({"role": "user", "content": f"note {CANARY}"})
    keys = Keys(redis_config.prefix)
    shard = shard_of("memory/ana", redis_config.shards)
    state = [keys.actor_log(shard, "memory/ana"), keys.actor_snapshot(shard, "memory/ana")]
    client = connect(redis_config)
    try:
        for key in state:
            assert 0 < await client.pttl(key) <= ttl * 1.5 * 1000
        with anyio.fail_after(20):
            while await client.exists(*state):  # noqa: ASYNC110
                await anyio.sleep(0.05)
    finally:
        await client.aclose()
    async with MemoryRuntime(with_ttl(ttl), transport=make_redis_transport()) as rt:
        assert (await rt.memory("ana").stats()).history_size == 0


async def test_the_due_time_is_stored_with_the_state_and_goes_with_a_forget(
    redis_config: RedisConfig, make_redis_transport: Callable[[], Transport]
) -> None:
    ttl = 3600.0
    keys = Keys(redis_config.prefix)
    due = keys.due(shard_of("memory/ana", redis_config.shards))
    client = connect(redis_config)
    try:
        async with MemoryRuntime(with_ttl(ttl), transport=make_redis_transport()) as rt:
            ana = rt.memory("ana")
            before = time.time()
            await ana.add({"role": "user", "content": "a note"})
            stored = await client.zscore(due, "memory/ana")
            # 1.25 TTLs after the last activity: what a memory loaded afresh waits.
            assert stored is not None and before + ttl * 1.25 <= stored <= time.time() + ttl * 1.25
            assert await rt.take_due("memory", 60.0) == []  # not due yet
            await ana.forget()
            assert await client.zscore(due, "memory/ana") is None
    finally:
        await client.aclose()


async def test_an_agent_due_after_its_state_expired_is_still_forgotten_everywhere(
    redis_config: RedisConfig, make_redis_transport: Callable[[], Transport]
) -> None:
    # No worker ran while Ana was due, so her keys expired: the next worker finds
    # her due time and forgets her, which erases what her keys no longer name (her
    # commands' stream entries, what she shared).
    ttl = 0.4
    keys = Keys(redis_config.prefix)
    shard = shard_of("memory/ana", redis_config.shards)
    async with MemoryRuntime(with_ttl(ttl), transport=make_redis_transport()) as rt:
        ana = rt.memory("ana")
        await ana.add({"role": "user", "content": f"my locker code is {CANARY}"})
        await ana.share(f"the locker code is {CANARY}", topic="lockers")
    client = connect(redis_config)
    try:
        with anyio.fail_after(20):
            while await client.exists(keys.actor_log(shard, "memory/ana")):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert await keys_holding(client, redis_config.prefix, CANARY.encode())
        with capture_logs() as logs:
            async with MemoryRuntime(with_ttl(ttl), transport=make_redis_transport()):
                with anyio.fail_after(20):
                    while await keys_holding(client, redis_config.prefix, CANARY.encode()):  # noqa: ASYNC110
                        await anyio.sleep(0.05)
        assert any(e["event"] == "memory_expired" and e["state_gone"] for e in logs)
    finally:
        await client.aclose()


async def test_an_agent_taken_as_due_moves_on_by_the_retry_interval(
    redis_config: RedisConfig, make_redis_transport: Callable[[], Transport]
) -> None:
    # Its Expire may be lost with the worker that took it: the due time moves on by
    # the retry interval instead of going, so the shard's next owner finds it then.
    keys = Keys(redis_config.prefix)
    client = connect(redis_config)
    try:
        for address in ("memory/zed", "pool/main"):
            await client.zadd(keys.due(shard_of(address, redis_config.shards)), {address: 1.0})
        async with MemoryRuntime(AppConfig(), transport=make_redis_transport()) as rt:
            taken: list[str] = []

            async def found() -> bool:
                taken.extend(await rt.take_due("memory", 3600.0))
                return bool(taken)

            await eventually(found, "the worker owns the shard and finds the agent due")
            assert taken == ["memory/zed"]  # of the kind asked for only
            assert await rt.take_due("memory", 3600.0) == []
            moved = await client.zscore(
                keys.due(shard_of("memory/zed", redis_config.shards)), "memory/zed"
            )
            assert moved is not None and moved > time.time() + 3000
    finally:
        await client.aclose()


def test_a_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ttl must be a positive number"):
        RetentionConfig(ttl=0)


class FakeClock:
    """Stands for the ``time`` module in the memory actor: a clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def time(self) -> float:
        return self.now


async def test_a_command_to_an_agent_idle_past_its_ttl_finds_it_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr("actormem.actors.memory.actor.time", clock)
    with capture_logs() as logs:
        async with MemoryRuntime(with_ttl(60)) as rt:
            ana = rt.memory("ana")
            await ana.add({"role": "user", "content": "an old note"})
            clock.now += 59
            assert (await ana.stats()).history_size == 1  # a read is activity too
            clock.now += 59
            assert (await ana.stats()).history_size == 1
            clock.now += 60
            await ana.add({"role": "user", "content": "a new note"})
            assert [m.content for m in await ana.get(scope="history")] == ["a new note"]
    assert [e["idle_s"] for e in logs if e["event"] == "memory_expired"] == [60.0]


async def test_a_memory_loaded_afresh_waits_for_the_stale_part_of_its_stored_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr("actormem.actors.memory.actor.time", clock)
    async with MemoryRuntime(with_ttl(100)) as rt:
        factory = memory_factory(rt.app_config)
        first = factory(ActorContext(rt, "memory/ana"))
        first.durable_restore(None, [])
        stored = StoredState()
        await first.receive(Add(messages=[Message(role="user", content="kept")]))
        changes = stored.keep(first)
        assert changes.snapshot is not None and changes.expire_after == 150
        clock.now += 20  # activity the stored time does not show (under a quarter TTL)
        await first.receive(Add(messages=[Message(role="user", content="kept too")]))
        assert stored.keep(first).snapshot is None
        again = factory(ActorContext(rt, "memory/ana"))
        again.durable_restore(stored.snapshot, stored.log)
        clock.now += 100  # 100 s after the last activity, 120 after the stored one
        assert await again.receive(Expire()) is False
        clock.now += 5  # 125 s after the stored time: 1.25 TTLs
        assert await again.receive(Expire()) is True
        assert again._stats().history_size == 0
