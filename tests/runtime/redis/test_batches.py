"""A run of one actor's commands read together is handled as a batch: each command
answered on its own, in order, their effects stored as one change set, each once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from actormem.runtime import Runtime
from actormem.runtime.redis import Keys, RedisConfig, _scripts, register_message_types, shard_of
from actormem.runtime.state import DurableChanges
from tests.runtime.redis.test_group_commit import commit_args, commit_group
from tests.runtime.redis.test_transport import worker
from tests.runtime.redis.test_unsent import COMMIT_SHA, held
from tests.support.actors import GetState, Ledger, RefusedError
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio


class Put(msgspec.Struct, frozen=True, tag="batch.Put"):
    """Record ``token``; the reply is how many tokens the ledger holds then."""

    reply_type: ClassVar[Any] = int
    batch: ClassVar[bool] = True

    token: str


class Bad(msgspec.Struct, frozen=True, tag="batch.Bad"):
    """Refused as bad input (an expected error): changes nothing."""

    batch: ClassVar[bool] = True

    token: str


class Shaky(msgspec.Struct, frozen=True, tag="batch.Shaky"):
    """Like ``Put``, but the handler crashes the first time it sees ``token``, after
    recording it in memory."""

    reply_type: ClassVar[Any] = int
    batch: ClassVar[bool] = True

    token: str


register_message_types(Put, Bad, Shaky)


class BatchLedger(Ledger):
    """A ledger that takes batchable commands and counts its change sets."""

    change_sets: ClassVar[int] = 0
    shaken: ClassVar[set[str]] = set()

    async def receive(self, message: Any) -> Any:
        match message:
            case Put(token=token) | Shaky(token=token):
                self.tokens.append(token)
                self._new.append(token.encode())
                if isinstance(message, Shaky) and token not in BatchLedger.shaken:
                    BatchLedger.shaken.add(token)
                    raise RuntimeError(f"shaky {token}")
                return len(self.tokens)
            case Bad(token=token):
                raise RefusedError(f"bad {token}")
        return await super().receive(message)

    def durable_changes(self) -> DurableChanges:
        BatchLedger.change_sets += 1
        return super().durable_changes()


def _register(rt: Runtime) -> None:
    rt.register("batched", BatchLedger)


async def _queued_then_served(
    redis_client: aioredis.Redis,
    config: RedisConfig,
    address: str,
    commands: list[Any],
    worker_client: aioredis.Redis | None = None,
) -> list[Any]:
    """Send ``commands`` to ``address`` as asks, in order, while no worker runs (so
    one read takes them all), then start a worker; return each ask's outcome (its
    reply or the error raised)."""
    stream = Keys(config.prefix).stream(shard_of(address, config.shards))
    outcomes: list[Any] = [None] * len(commands)
    done = anyio.Event()

    async with worker(redis_client, config, worker=False) as client:

        def asking(n: int, command: Any) -> Callable[[], Awaitable[None]]:
            async def ask() -> None:
                try:
                    outcomes[n] = await client.ref(address).ask(command)
                except Exception as exc:
                    outcomes[n] = exc
                if all(o is not None for o in outcomes):
                    done.set()

            return ask

        async with anyio.create_task_group() as tg:
            for n, command in enumerate(commands):
                tg.start_soon(asking(n, command))

                async def sent(count: int = n + 1) -> bool:
                    return await redis_client.xlen(stream) == count

                await eventually(sent, f"command {n} in the stream")
            async with worker(worker_client or redis_client, config) as rt:
                _register(rt)
                await done.wait()
    return outcomes


async def _stored_log(redis_client: aioredis.Redis, config: RedisConfig, address: str) -> list[str]:
    key = Keys(config.prefix).actor_log(shard_of(address, config.shards), address)
    return [entry.decode() for entry in await redis_client.lrange(key, 0, -1)]


async def test_a_batch_answers_each_command_in_order_and_stores_one_change_set(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    BatchLedger.change_sets = 0
    address = "batched/refusing"
    outcomes = await _queued_then_served(
        redis_client,
        redis_config,
        address,
        [Put("a"), Put("b"), Bad("c"), Put("d"), Put("e")],
    )
    # Each ask gets its own reply; the refused one its error, and it changes nothing.
    assert outcomes[:2] == [1, 2]
    assert isinstance(outcomes[2], RefusedError)
    assert outcomes[3:] == [3, 4]
    assert await _stored_log(redis_client, redis_config, address) == ["a", "b", "d", "e"]
    # One change set for the five commands read together.
    assert BatchLedger.change_sets == 1


async def test_a_crash_inside_a_batch_has_the_batch_handled_again_one_at_a_time(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "batched/crashing"
    with capture_logs() as logs:
        outcomes = await _queued_then_served(
            redis_client,
            redis_config,
            address,
            [Put("a"), Shaky("b"), Put("c")],
        )
    assert [e["commands"] for e in logs if e["event"] == "batch_handled_again"] == [3]
    # The crash dropped what the batch had changed in memory; handled again, each
    # command is applied once, in order, and answered once.
    assert outcomes == [1, 2, 3]
    assert await _stored_log(redis_client, redis_config, address) == ["a", "b", "c"]
    async with worker(redis_client, redis_config) as rt:
        _register(rt)
        state = await rt.ref(address).ask(GetState())
        assert rt.transport.stats().dead_lettered == 0  # type: ignore[attr-defined]
    assert state.tokens == ["a", "b", "c"]


@pytest.mark.slow
async def test_a_batch_whose_worker_stops_before_its_commit_is_applied_once_by_the_next(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    address = "batched/redelivered"
    keys = Keys(redis_config.prefix)
    shard = shard_of(address, redis_config.shards)
    stream = keys.stream(shard)
    # The first worker's commits of this shard never reach Redis: it stops (waiting
    # at most retry_for to store them) with the batch handled but not stored.
    config = msgspec.structs.replace(redis_config, retry_for=0.5)
    client = held(config, COMMIT_SHA, keys.lease(shard))
    try:
        async with worker(redis_client, config, worker=False) as sender:
            for token in ("a", "b", "c"):
                await sender.ref(address).tell(Put(token))

            async def queued() -> bool:
                return await redis_client.xlen(stream) == 3

            await eventually(queued, "the commands in the stream")
            BatchLedger.change_sets = 0
            async with worker(client, config) as rt:
                _register(rt)

                async def handled() -> bool:
                    return client.held == 1

                await eventually(handled, "the batch handled, its commit held")
        assert BatchLedger.change_sets == 1  # the three as one batch
        assert await _stored_log(redis_client, config, address) == []
        # The next worker takes the entries left pending and applies each once.
        async with worker(redis_client, config) as rt:
            _register(rt)

            async def applied() -> bool:
                state = await rt.ref(address).ask(GetState())
                return len(state.tokens) >= 3

            await eventually(applied, "the commands applied by the next worker")
            state = await rt.ref(address).ask(GetState())
    finally:
        await client.aclose()
    assert state.tokens == ["a", "b", "c"]
    assert await _stored_log(redis_client, config, address) == ["a", "b", "c"]


async def test_the_commit_script_stores_a_change_set_whole_or_not_at_all(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    stream, lease = keys.stream(0), keys.lease(0)
    log, snapshot, applied = (
        keys.actor_log(0, "a"),
        keys.actor_snapshot(0, "a"),
        keys.actor_applied(0, "a"),
    )
    await redis_client.set(lease, "1:w")
    await redis_client.xgroup_create(stream, "g", id="0", mkstream=True)
    entries = [(await redis_client.xadd(stream, {b"e": b"x"})).decode() for _ in range(5)]
    await redis_client.xreadgroup("g", "c", {stream: ">"})
    commit = redis_client.register_script(_scripts.COMMIT)

    async def store(ids: list[str], items: list[bytes], at: int = 0) -> Any:
        """One change set of the commands ``ids`` (the entries from ``at`` on), its
        log items and a snapshot with the last."""
        last = len(ids) - 1
        commands = [
            (
                entries[at + n],
                command,
                b"S" if n == last else None,
                False,
                items if n == last else [],
            )
            for n, command in enumerate(ids)
        ]
        following = {entries[at + n]: last - n for n in range(len(ids))}
        args = commit_args("1:w", [commit_group(commands, following=following)])
        return await commit(keys=[lease, stream, keys.unsent(0), log, snapshot, applied], args=args)

    assert await store(["c1", "c2"], [b"x1", b"x2"]) == [1, 1]
    # The same set again (a commit whose reply was lost): only acked.
    assert await store(["c1", "c2"], [b"x1", b"x2"]) == [2, 2]
    # A set of which some commands were applied and some not: nothing stored or acked.
    assert await store(["c1", "c3"], [b"x1", b"x3"], at=2) == [3, 3]
    assert await redis_client.lrange(log, 0, -1) == [b"x1", b"x2"]
    assert await redis_client.zrange(applied, 0, -1) == [b"c1", b"c2"]
    pending = await redis_client.xpending_range(stream, "g", min="-", max="+", count=10)
    assert [p["message_id"].decode() for p in pending] == entries[2:]
