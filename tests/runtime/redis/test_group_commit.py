"""Group commits: a durable actor's changes are stored a batch per call, and the
reply to a command is sent only once its changes are stored."""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import Keys, RedisConfig, _rounds, _scripts, connect, shard_of
from actormem.runtime.redis._commits import _COMMIT_CALLS, _durable
from actormem.runtime.state import DurableChanges
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState

pytestmark = pytest.mark.anyio

COMMIT_SHA = hashlib.sha1(_scripts.COMMIT.encode()).hexdigest()


class GatedRedis(aioredis.Redis):
    """A client whose commit calls wait for ``gate`` and are counted."""

    gate: anyio.Event
    commits = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] == "EVALSHA" and args[1] == COMMIT_SHA:
            type(self).commits += 1
            await self.gate.wait()
        return await super().execute_command(*args, **options)


def gated(config: RedisConfig) -> GatedRedis:
    client = GatedRedis.from_pool(connect(config).connection_pool)
    client.gate = anyio.Event()
    GatedRedis.commits = 0
    return client


async def test_an_ask_is_answered_only_once_its_changes_are_stored(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    client = gated(redis_config)
    address = "ledger/gated"
    log_key = Keys(redis_config.prefix).actor_log(shard_of(address, redis_config.shards), address)
    try:
        async with worker(client, redis_config) as rt:
            answered: list[int] = []

            async def ask() -> None:
                answered.append(await rt.ref(address).ask(Add("t1", 5)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                with anyio.fail_after(10):
                    while not GatedRedis.commits:  # noqa: ASYNC110 (test poll)
                        await anyio.sleep(0.01)
                await anyio.sleep(0.2)
                # Handled, but not stored: no answer yet, nothing in Redis.
                assert answered == []
                assert await redis_client.llen(log_key) == 0
                client.gate.set()
            assert answered == [5]
            assert await redis_client.lrange(log_key, 0, -1) == [b"t1"]
    finally:
        await client.aclose()


async def test_a_read_that_changed_nothing_is_answered_without_waiting_for_a_commit(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    client = gated(redis_config)
    client.gate.set()
    address = "ledger/reader"
    try:
        async with worker(client, redis_config) as rt:
            await rt.ref(address).ask(Add("t1", 5))
            stored = GatedRedis.commits
            client.gate = anyio.Event()  # any commit from now on would hang
            with anyio.fail_after(10):
                for _ in range(20):
                    state = await rt.ref(address).ask(GetState())
            assert state.tokens == ["t1"]
            assert GatedRedis.commits == stored  # no commit call for the reads
            client.gate.set()
        stream = Keys(redis_config.prefix).stream(shard_of(address, redis_config.shards))
        assert (await redis_client.xpending(stream, "workers"))["pending"] == 0
    finally:
        await client.aclose()


async def test_commands_handled_while_a_commit_is_in_flight_share_the_next_one(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    client = gated(redis_config)
    agents = [f"ledger/g{i}" for i in range(5)]
    try:
        async with worker(client, redis_config) as rt:
            await rt.ref(agents[0]).tell(Add("first"))
            with anyio.fail_after(10):
                while not GatedRedis.commits:  # noqa: ASYNC110 (test poll)
                    await anyio.sleep(0.01)
            # The first commit is stuck: everything handled meanwhile queues up.
            for n in range(100):
                await rt.ref(agents[n % 5]).tell(Add(f"t{n}"))
            with anyio.fail_after(10):
                while rt.stats().processed < 101:  # noqa: ASYNC110 (test poll)
                    await anyio.sleep(0.01)
            client.gate.set()
            with anyio.fail_after(10):
                while not rt.transport.settled():  # type: ignore[attr-defined]  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            commits = GatedRedis.commits
            states = [await rt.ref(a).ask(GetState()) for a in agents]
        # Each shard's first calls (one per actor they hold, _COMMIT_CALLS at most)
        # carried what was there when they started, and as many more calls the rest.
        shards = {shard_of(a, redis_config.shards) for a in agents}
        assert commits <= 2 * _COMMIT_CALLS * len(shards), commits
        assert states[0].tokens == ["first", *(f"t{n}" for n in range(0, 100, 5))]
        for i, state in enumerate(states[1:], 1):
            assert state.tokens == [f"t{n}" for n in range(i, 100, 5)]
    finally:
        await client.aclose()


def test_an_actor_is_durable_by_its_class_or_by_methods_of_its_own() -> None:
    class Plain:
        pass

    class Kept:
        def durable_changes(self) -> DurableChanges:
            return DurableChanges([])

        def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
            pass

    own = Plain()
    own.durable_changes = lambda: DurableChanges([])  # type: ignore[attr-defined]
    own.durable_restore = lambda snapshot, log: None  # type: ignore[attr-defined]
    # Asked twice each: the second answer comes from what was kept of the class.
    for _ in range(2):
        assert _durable(Kept())  # type: ignore[arg-type]
        assert _durable(own)  # type: ignore[arg-type]
        assert not _durable(Plain())  # type: ignore[arg-type]


async def test_every_commit_call_announced_arrives_so_later_calls_wait_for_none(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    agents = [f"ledger/w{i}" for i in range(40)]
    client = connect(redis_config)
    try:
        async with worker(client, redis_config) as rt:
            async with anyio.create_task_group() as tg:
                for n in range(400):
                    tg.start_soon(rt.ref(agents[n % 40]).ask, Add(f"t{n}", 1))
            with anyio.fail_after(10):
                while not rt.transport.settled():  # type: ignore[attr-defined]  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            # Each commit loop woken for the adds (of many shards at once) has run: no
            # call made from now on waits a turn for one that will not come.
            assert _rounds.rounds(client).coming == 0
            states = [await rt.ref(a).ask(GetState()) for a in agents]
        assert [len(state.tokens) for state in states] == [10] * 40
    finally:
        await client.aclose()


Command = tuple[str, str, bytes | None, bool, list[bytes]]


class OneActorGated(aioredis.Redis):
    """A client whose commit calls storing ``held``'s changes wait for ``gate``."""

    gate: anyio.Event
    held: str = ""
    stuck = 0

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] == "EVALSHA" and args[1] == COMMIT_SHA and self.held in args:
            type(self).stuck += 1
            await self.gate.wait()
        return await super().execute_command(*args, **options)


async def test_a_commit_call_in_flight_holds_back_only_its_own_actors(
    redis_config: RedisConfig, redis_client: aioredis.Redis
) -> None:
    keys = Keys(redis_config.prefix)
    shards = redis_config.shards
    slow = "ledger/slow"
    # Another actor of the same shard.
    fast = next(
        f"ledger/f{i}"
        for i in range(1000)
        if shard_of(f"ledger/f{i}", shards) == shard_of(slow, shards)
    )
    client = OneActorGated.from_pool(connect(redis_config).connection_pool)
    client.gate = anyio.Event()
    OneActorGated.held = keys.actor_log(shard_of(slow, shards), slow)
    OneActorGated.stuck = 0
    try:
        async with worker(client, redis_config) as rt:
            await rt.ref(slow).tell(Add("s1"))
            with anyio.fail_after(10):
                while not OneActorGated.stuck:  # noqa: ASYNC110 (test poll)
                    await anyio.sleep(0.01)
            answered: list[int] = []

            async def ask_slow() -> None:
                answered.append(await rt.ref(slow).ask(Add("s2", 2)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask_slow)
                # The other actor's commit does not wait for the stuck call...
                with anyio.fail_after(10):
                    assert await rt.ref(fast).ask(Add("f1", 7)) == 7
                # ... but the stuck actor's next one does: no answer, nothing stored.
                await anyio.sleep(0.2)
                assert answered == []
                assert await redis_client.llen(OneActorGated.held) == 0
                client.gate.set()
            assert answered == [3]
            assert (await rt.ref(slow).ask(GetState())).tokens == ["s1", "s2"]
        assert await redis_client.lrange(OneActorGated.held, 0, -1) == [b"s1", b"s2"]
    finally:
        await client.aclose()


Group = tuple[list[Any], list[bytes]]


def commit_group(
    commands: list[Command],
    replies: dict[str, bytes] | None = None,
    unsent: dict[str, list[tuple[str, bytes]]] | None = None,
    following: dict[str, int] | None = None,
) -> Group:
    """One agent's part of the commit script's arguments, what describes its commands
    and their data: (entry, id, snapshot, replace, items) per command, the reply of
    the commands named in ``replies``, the unsent tells of those named in ``unsent``,
    and how many commands of its change set follow each command named in
    ``following`` (a batch; else none)."""
    described: list[Any] = [len(commands)]
    data: list[bytes] = []
    for entry, command, snapshot, replace, items in commands:
        reply = (replies or {}).get(entry)
        tells = (unsent or {}).get(entry, [])
        described += [(following or {}).get(entry, 0), entry, command, snapshot is not None]
        described += [replace, reply is not None, 60_000, len(items), len(tells)]
        data += [x for x in (snapshot, reply) if x is not None]
        data += [*items, *(x for tell in tells for x in tell)]
    return described, data


def commit_args(
    lease: str, groups: list[Group], writes: tuple[int, list[tuple[int, bytes]]] | None = None
) -> list[Any]:
    """The commit script's ARGV for the agents' ``groups`` (see :func:`commit_group`), and
    ``writes``: the index in KEYS of a reply stream and the replies written to it, by
    command number."""
    described = [x for group, _ in groups for x in group]
    data = [x for _, group_data in groups for x in group_data]
    written: list[Any] = []
    if writes is not None:
        index, replies = writes
        written = [100, 5_000, *(x for number, _ in replies for x in (number, index))]
        data += [b"r", *(reply for _, reply in replies)]
    packed = msgspec.msgpack.encode((described, written))
    return [lease, "g", "1000.5", 100, len(groups), packed, *data]


async def test_the_commit_script_stores_each_agent_s_commands_once_and_in_order(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    stream, lease, unsent = keys.stream(0), keys.lease(0), keys.unsent(0)
    await redis_client.set(lease, "1:w")
    await redis_client.xgroup_create(stream, "g", id="0", mkstream=True)
    entries = [(await redis_client.xadd(stream, {b"e": b"x"})).decode() for _ in range(7)]
    await redis_client.xreadgroup("g", "c", {stream: ">"})
    commit = redis_client.register_script(_scripts.COMMIT)

    def agent_keys(address: str) -> list[str]:
        return [
            keys.actor_log(0, address),
            keys.actor_snapshot(0, address),
            keys.actor_applied(0, address),
        ]

    reply_a1 = keys.reply(0, "a", "a1")
    first = await commit(
        keys=[lease, stream, unsent, *agent_keys("a"), reply_a1],
        args=commit_args(
            "1:w",
            [
                commit_group(
                    [(entries[0], "a1", None, False, [b"x1"])],
                    {entries[0]: b"R1"},
                    {entries[0]: [("a1.1", b"T1"), ("a1.fwd", b"F1")]},
                )
            ],
        ),
    )
    assert first == [1]
    # The tells it sent that were not written yet are kept with it.
    assert await redis_client.hgetall(unsent) == {b"a1.1": b"T1", b"a1.fwd": b"F1"}
    # The reply is kept with the effect, for a bounded time.
    assert await redis_client.get(reply_a1) == b"R1"
    assert 0 < await redis_client.pttl(reply_a1) <= 60_000
    # The same command again (a commit whose reply was lost), with new ones of the
    # same agent behind it; another agent replaces its log mid-batch.
    second = await commit(
        keys=[lease, stream, unsent, *agent_keys("a"), *agent_keys("c"), reply_a1],
        args=commit_args(
            "1:w",
            [
                commit_group(
                    [
                        (entries[0], "a1", None, False, [b"x1"]),
                        (entries[1], "a2", None, False, [b"x2", b"x3"]),
                        (entries[2], "", None, False, [b"x4"]),
                    ],
                    {entries[0]: b"R1 again"},
                    {entries[0]: [("a1.1", b"T1 again")], entries[1]: [("a2.1", b"T2")]},
                ),
                commit_group(
                    [
                        (entries[3], "c1", None, False, [b"p1"]),
                        (entries[4], "c2", b"S1", True, [b"q1"]),
                        (entries[5], "c3", b"S2", False, [b"q2"]),
                        (entries[6], "c3", None, False, [b"dup"]),
                    ]
                ),
            ],
        ),
    )
    assert second == [2, 1, 1, 1, 1, 1, 2]
    assert await redis_client.get(reply_a1) == b"R1"  # the first reply stays
    # ... and so do the first tells; the new command's are kept too.
    assert await redis_client.hgetall(unsent) == {b"a1.1": b"T1", b"a1.fwd": b"F1", b"a2.1": b"T2"}
    assert await redis_client.lrange(keys.actor_log(0, "a"), 0, -1) == [b"x1", b"x2", b"x3", b"x4"]
    assert await redis_client.lrange(keys.actor_log(0, "c"), 0, -1) == [b"q1", b"q2"]
    assert await redis_client.get(keys.actor_snapshot(0, "c")) == b"S2"
    assert await redis_client.exists(keys.actor_snapshot(0, "a")) == 0
    assert await redis_client.zrange(keys.actor_applied(0, "a"), 0, -1) == [b"a1", b"a2"]
    assert await redis_client.zrange(keys.actor_applied(0, "c"), 0, -1) == [b"c1", b"c2", b"c3"]
    assert (await redis_client.xpending(stream, "g"))["pending"] == 0
    # Fenced off: another owner's lease changes nothing.
    await redis_client.set(lease, "2:other")
    fenced = await commit(
        keys=[lease, stream, unsent, *agent_keys("a")],
        args=commit_args(
            "1:w", [commit_group([("", "a9", None, False, [b"late"])], None, {"": [("a9.1", b"")]})]
        ),
    )
    assert fenced == -1
    assert await redis_client.hlen(unsent) == 3
    assert await redis_client.llen(keys.actor_log(0, "a")) == 4


async def test_the_commit_call_writes_the_replies_of_the_commands_it_stores(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    stream, lease, unsent = keys.stream(0), keys.lease(0), keys.unsent(0)
    replies = keys.replies("asker")
    await redis_client.set(lease, "1:w")
    await redis_client.xgroup_create(stream, "g", id="0", mkstream=True)
    entries = [(await redis_client.xadd(stream, {b"e": b"x"})).decode() for _ in range(3)]
    await redis_client.xreadgroup("g", "c", {stream: ">"})
    commit = redis_client.register_script(_scripts.COMMIT)
    names = [lease, stream, unsent, *(k(0, "a") for k in (keys.actor_log, keys.actor_snapshot))]
    names += [keys.actor_applied(0, "a"), replies]

    async def call(commands: list[Command], following: dict[str, int], written: list[Any]) -> Any:
        """The commands, and the replies (command number, reply) written to ``replies``."""
        group = commit_group(commands, None, None, following)
        writes = (len(names), written) if written else None
        return await commit(keys=names, args=commit_args("1:w", [group], writes))

    first = await call([(entries[0], "a1", None, False, [b"x1"])], {}, [(1, b"R1")])
    assert first == [1]
    assert [f for _, f in await redis_client.xrange(replies)] == [{b"r": b"R1"}]
    assert 0 < await redis_client.pttl(replies) <= 5_000
    # A change set of which one command was applied and one not stores nothing, and
    # writes no reply.
    partly = [(entries[1], "a1", None, False, [b"x1"]), (entries[2], "a2", None, False, [b"x2"])]
    assert await call(partly, {entries[1]: 1}, [(1, b"R1 again"), (2, b"R2")]) == [3, 3]
    assert await redis_client.xlen(replies) == 1
    # The same command again (a commit whose reply was lost): answered again.
    assert await call(partly[:1], {}, [(1, b"R1 again")]) == [2]
    assert [f[b"r"] for _, f in await redis_client.xrange(replies)] == [b"R1", b"R1 again"]
    # Fenced off: nothing written.
    await redis_client.set(lease, "2:other")
    assert await call(partly[1:], {}, [(1, b"R2")]) == -1
    assert await redis_client.xlen(replies) == 2
