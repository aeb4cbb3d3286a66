"""Worker processes against one Redis: sharing the shards, a poison pill, bad specs.

Kills, restarts and stale owners are in tests/faults/test_process_faults.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime import HandlerError, Runtime
from actormem.runtime.errors import ConfigError, TransportUnavailableError
from actormem.runtime.redis import (
    CONSUMER_GROUP,
    Keys,
    RedisConfig,
    connect,
    default_codec,
    free_port,
    shard_of,
)
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses, load_register, worker_limit
from tests.support.actors import Add, Crash, GetState
from tests.support.streams import (
    client_runtime,
    eventually,
    every_worker_owns_shards,
    owners,
    stored_tokens,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REGISTER = "tests.support.actors:register"
LEDGERS = [f"ledger/l{i}" for i in range(12)]


async def send_commands(rt: Runtime, count: int, delay: float = 0.0) -> dict[str, list[str]]:
    """Tell ``count`` Adds spread over the ledgers; return what each should hold."""
    expected: dict[str, list[str]] = {a: [] for a in LEDGERS}
    for i in range(count):
        address = LEDGERS[i % len(LEDGERS)]
        token = f"cmd{i:04d}"
        expected[address].append(token)
        await rt.ref(address).tell(Add(token, delay=delay))
    return expected


def exactly_once(stored: dict[str, list[str]], expected: dict[str, list[str]]) -> bool:
    # Per-agent order is kept too: a ledger's log is its commands in send order.
    return stored == expected


async def test_three_workers_share_the_shards_and_apply_each_command_once(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, shards=6)
    async with WorkerProcesses(3, config, REGISTER) as workers, client_runtime(config) as rt:
        read_owners = owners(workers)

        async def shared() -> bool:
            return await read_owners() == set(workers.ids)

        await eventually(shared, "every worker owns some shards")
        expected = await send_commands(rt, 120)

        async def done() -> bool:
            return exactly_once(await stored_tokens(redis_client, config, LEDGERS), expected)

        await eventually(done, "every command applied once")
        state = await rt.ref(LEDGERS[0]).ask(GetState())
        assert state.tokens == expected[LEDGERS[0]]


@pytest.mark.parametrize("max_deliveries", [1, 2])
async def test_a_poison_pill_that_kills_its_workers_is_dead_lettered_and_answered(
    redis_client: aioredis.Redis, redis_config: RedisConfig, max_deliveries: int
) -> None:
    config = msgspec.structs.replace(redis_config, max_deliveries=max_deliveries)
    async with WorkerProcesses(1, config, REGISTER) as workers, client_runtime(config) as rt:
        async with anyio.create_task_group() as tg:
            outcome: list[BaseException] = []

            async def ask_crash() -> None:
                try:
                    await rt.ref("ledger/poison").ask(Crash())
                except HandlerError as exc:
                    outcome.append(exc)

            tg.start_soon(ask_crash)
            # Each worker that starts on the pill dies of it (the second one's
            # attempt is counted in Redis); the next finds it pending.
            for _ in range(max_deliveries):

                async def died() -> bool:
                    return workers.pid(0) is None

                await eventually(died, "the pill kills the worker")
                workers.start(0)
        [error] = outcome
        assert f"handling it started {max_deliveries} times and never finished" in str(error)
        assert await rt.ref("ledger/poison").ask(Add("after")) == 1
    letters = await redis_client.xrange(Keys(config.prefix).dead_letters())
    assert [default_codec.decode_envelope(f[b"e"]).body for _, f in letters] == [Crash()]


async def test_commands_a_dead_worker_read_but_never_started_are_not_poison(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    """A worker reads its stream in batches: when it dies, the entries it had read
    but not begun are delivered again, and that is no reason to dead-letter them,
    however many workers die that way."""
    config = msgspec.structs.replace(redis_config, max_deliveries=2)
    keys = Keys(config.prefix)
    stream = keys.stream(shard_of("ledger/x", config.shards))
    await redis_client.xgroup_create(stream, CONSUMER_GROUP, id="0", mkstream=True)
    async with client_runtime(config) as rt:
        for i in range(5):
            await rt.ref("ledger/x").tell(Add(f"t{i}"))
        await rt.transport.flush()  # type: ignore[attr-defined]
    # Three workers in turn read them and die before starting any.
    await redis_client.xreadgroup(CONSUMER_GROUP, "dead1", {stream: ">"}, count=10)
    for dead in ("dead2", "dead3"):
        ids = [
            e["message_id"]
            for e in await redis_client.xpending_range(stream, CONSUMER_GROUP, "-", "+", 10)
        ]
        await redis_client.xclaim(stream, CONSUMER_GROUP, dead, min_idle_time=0, message_ids=ids)
    pending = await redis_client.xpending_range(stream, CONSUMER_GROUP, "-", "+", 10)
    assert [e["times_delivered"] for e in pending] == [3] * 5
    async with WorkerProcesses(1, config, REGISTER), client_runtime(config) as rt:
        state = await rt.ref("ledger/x").ask(GetState())
    assert state.tokens == [f"t{i}" for i in range(5)]
    assert await redis_client.xlen(keys.dead_letters()) == 0
    # Handling each returned: no attempt stays counted against it (a later crash,
    # before its commit, must not bring it closer to the dead letters).
    assert [k async for k in redis_client.scan_iter(match=f"{config.prefix}:*:try:*")] == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must be 'module:function'"),
        ("no_such_module_xyz:register", "cannot import 'no_such_module_xyz'"),
        ("tests.support.actors:nothing_here", "has no function 'nothing_here'"),
    ],
)
def test_a_bad_register_spec_is_a_config_error(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_register(spec)


async def test_a_worker_that_cannot_start_says_why(redis_config: RedisConfig) -> None:
    with pytest.raises(TransportUnavailableError, match="has no function 'nope'"):
        async with WorkerProcesses(1, redis_config, "tests.support.actors:nope"):
            pass


def test_workers_need_a_shared_redis_url() -> None:
    with pytest.raises(ValueError, match="need a shared Redis"):
        WorkerProcesses(2, RedisConfig(url=None), REGISTER)


def test_more_workers_than_the_limit_are_refused_before_any_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = RedisConfig(url="redis://127.0.0.1:1")
    with pytest.raises(ConfigError, match=r"^5 worker processes is over the limit of 4: ask"):
        WorkerProcesses(5, config, REGISTER, limit=4)
    most = worker_limit()
    with pytest.raises(ConfigError, match=rf"over the limit of {most} \(4 per CPU core\)"):
        WorkerProcesses(most + 1, config, REGISTER)
    assert list(tmp_path.iterdir()) == []  # not even a log dir


async def test_closed_workers_leave_no_process_and_their_logs_readable(
    redis_config: RedisConfig,
) -> None:
    async with WorkerProcesses(2, redis_config, REGISTER) as workers:
        pids = [workers.pid(i) for i in range(2)]
        # Each in a process group of its own: a terminal's Ctrl-C reaches only the
        # parent, which stops them after its own work is done.
        assert [os.getpgid(pid) for pid in pids if pid] == pids
    # Readable after they stopped; the dir goes when this process ends (the
    # simulation's process tests check that).
    assert "worker_stopped" in workers.log_path(0).read_text()
    for pid in pids:
        assert pid is not None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_workers_get_the_environment_they_are_given(
    redis_config: RedisConfig,
) -> None:
    env = {"TEST_LEDGER_KIND": "books"}
    spec = "tests.support.actors:register_named"
    async with WorkerProcesses(1, redis_config, spec, env=env), client_runtime(redis_config) as rt:
        assert await rt.ref("books/b").ask(Add("x", 5)) == 5


def test_a_worker_command_with_an_unreachable_redis_prints_one_line() -> None:
    redis = RedisConfig(url=f"redis://127.0.0.1:{free_port()}", socket_timeout=0.3)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "actormem.runtime.redis.worker",
            "--register",
            REGISTER,
            "--redis-json",
            msgspec.json.encode(redis).decode(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("actormem worker: error: connecting to Redis: Redis unavailable")


async def test_a_share_sent_by_a_memory_on_one_worker_reaches_the_pool_on_another(
    redis_config: RedisConfig,
) -> None:
    # With no shared secret: the pool trusts the envelope's sender, which travels
    # with the envelope, so an agent's memory on one worker hands a share on to the
    # pool on another, and the pool's delivery comes back as the pool's.
    from actormem.actors import AppConfig, MemoryRuntime

    config = msgspec.structs.replace(redis_config, shards=4)
    async with WorkerProcesses(2, config, "actormem.actors.app.wiring:worker_register") as workers:
        read_owners = owners(workers)

        async def shared() -> bool:
            return await read_owners() == set(workers.ids)

        await eventually(shared, "both workers own shards")
        client = connect(config)
        keys = Keys(config.prefix)
        try:
            lease = {
                s: (await client.get(keys.lease(s)) or b"").decode().partition(":")[2]
                for s in range(config.shards)
            }
        finally:
            await client.aclose()
        pool_owner = lease[shard_of("pool/main", config.shards)]
        names = (f"agent{i}" for i in range(1000))
        sharer = next(n for n in names if lease[shard_of(f"memory/{n}", 4)] != pool_owner)
        app = AppConfig(redis=config)
        transport = RedisTransport(None, config, worker=False)
        async with MemoryRuntime(app, transport=transport) as rt:
            listener = rt.memory("listener")
            await listener.subscribe("news")
            await rt.memory(sharer).share("the bridge is closed", topic="news")

            async def arrived() -> bool:
                return any(i.source == sharer for i in await listener.held_insights())

            await eventually(arrived, "the share reaches the subscriber")


async def test_workers_started_from_code_run_the_app_config_built_in_code(
    redis_config: RedisConfig,
) -> None:
    from actormem.actors import AppConfig, MemoryConfig, MemoryInputError, MemoryRuntime
    from actormem.actors.app.wiring import worker_env

    app = AppConfig(redis=redis_config, memory=MemoryConfig(max_message_chars=50))
    spec = "actormem.actors.app.wiring:worker_register"
    async with WorkerProcesses(1, redis_config, spec, env=worker_env(app)):
        transport = RedisTransport(None, redis_config, worker=False)
        async with MemoryRuntime(app, transport=transport) as rt:
            await rt.memory("a").add({"role": "user", "content": "x" * 50})
            with pytest.raises(MemoryInputError, match="the limit is 50"):
                await rt.memory("a").add({"role": "user", "content": "x" * 51})


@pytest.mark.parametrize(
    ("json", "message"),
    [
        ("{not json", "ACTORMEM_CONFIG_JSON: not valid JSON"),
        ("[1]", "ACTORMEM_CONFIG_JSON: expected a JSON object"),
        ('{"memory": {"max_message_chars": 0}}', "max_message_chars"),
    ],
)
async def test_a_bad_app_config_in_the_environment_stops_the_worker_with_the_reason(
    redis_config: RedisConfig, json: str, message: str
) -> None:
    from actormem.actors.app.wiring import CONFIG_JSON_ENV

    spec = "actormem.actors.app.wiring:worker_register"
    with pytest.raises(TransportUnavailableError, match=message):
        async with WorkerProcesses(1, redis_config, spec, env={CONFIG_JSON_ENV: json}):
            pass


async def test_workers_stopped_together_give_their_leases_back_and_leave_the_registry(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # Each gets one SIGTERM: a second, sent while it gives its leases back (it no
    # longer watches for signals then), ended it before it had, now and then.
    keys = Keys(redis_config.prefix)
    for _ in range(5):
        async with WorkerProcesses(2, redis_config, REGISTER) as workers:
            await every_worker_owns_shards(workers)
        assert await redis_client.zrange(keys.workers(), 0, -1) == []
        leases = [await redis_client.get(keys.lease(s)) for s in range(redis_config.shards)]
        assert leases == [None] * redis_config.shards
