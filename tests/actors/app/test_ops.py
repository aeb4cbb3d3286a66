"""The operator's commands against real worker processes: ``dead-letters`` and
``health``, run as a user runs them (``actormem ...`` in a subprocess)."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import msgspec
import pytest
import redis.asyncio as aioredis
from anyio import run_process

from actormem.actors import AppConfig, MemoryRuntime
from actormem.actors.app.wiring import CONFIG_ENV
from actormem.actors.memory.commands import Add
from actormem.actors.messages import Message
from actormem.runtime._envelope import Envelope
from actormem.runtime.config import RuntimeConfig
from actormem.runtime.redis import CONSUMER_GROUP, Keys, RedisConfig, default_codec, shard_of
from actormem.runtime.redis.health import check_health
from actormem.runtime.redis.transport import RedisTransport
from actormem.runtime.redis.worker import WorkerProcesses
from tests.support import ROOT
from tests.support.streams import eventually, every_worker_owns_shards, lease_holders

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

APP = "actormem.actors.app.wiring:worker_register"


class Ran(msgspec.Struct):
    code: int
    out: str
    err: str


async def cli(*args: str) -> Ran:
    proc = await run_process(
        [sys.executable, "-m", "actormem.runtime.cli", *args], check=False, cwd=ROOT
    )
    return Ran(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def write_config(path: Path, redis: RedisConfig) -> str:
    """The deployment's TOML config (as an operator keeps one for its workers)."""
    path.write_text(
        '[runtime]\ntransport = "redis"\n\n[redis]\n'
        f'url = "{redis.url}"\nprefix = "{redis.prefix}"\nshards = {redis.shards}\n'
        f"lease_ms = {redis.lease_ms}\nclaim_idle_ms = {redis.claim_idle_ms}\n"
        f"block_ms = {redis.block_ms}\n"
    )
    return str(path)


@pytest.fixture
def config_file(tmp_path: Path, redis_config: RedisConfig) -> str:
    return write_config(tmp_path / "deployment.toml", redis_config)


@asynccontextmanager
async def deployment(
    redis_config: RedisConfig, config_file: str, workers: int
) -> AsyncIterator[WorkerProcesses]:
    async with WorkerProcesses(
        workers, redis_config, APP, env={CONFIG_ENV: config_file}, log_level="warning"
    ) as procs:
        await every_worker_owns_shards(procs)
        yield procs


@asynccontextmanager
async def app_client(redis_config: RedisConfig) -> AsyncIterator[MemoryRuntime]:
    config = AppConfig(redis=redis_config, runtime=RuntimeConfig(ask_timeout=30.0))
    transport = RedisTransport(redis_config.url, redis_config, worker=False)
    async with MemoryRuntime(config, transport=transport) as rt:
        yield rt


def said(text: str) -> str:
    return f"said: {text}"


async def add_letter(
    client: aioredis.Redis, config: RedisConfig, data: bytes, reason: str, entry: str = "1-0"
) -> str:
    """A dead letter as a worker writes one (the fields of DeadLetters.write)."""
    stream = Keys(config.prefix).stream(0)
    fields = {b"reason": reason, b"stream": stream, b"entry": entry, b"worker": "w-x", b"e": data}
    return (await client.xadd(Keys(config.prefix).dead_letters(), fields)).decode()  # type: ignore[arg-type]


async def test_dead_letters_list_show_requeue_drop_against_workers(
    redis_client: aioredis.Redis, redis_config: RedisConfig, config_file: str
) -> None:
    keys = Keys(redis_config.prefix)
    async with deployment(redis_config, config_file, 2), app_client(redis_config) as rt:
        alice = rt.memory("alice")
        await alice.add({"role": "user", "content": said("one")})
        # The command exactly as it went to the workers, with its command id: a
        # worker that applied it and died before its ack could have dead-lettered it.
        shard = shard_of("memory/alice", redis_config.shards)
        [(_, fields)] = await redis_client.xrange(keys.stream(shard))
        applied = await add_letter(redis_client, redis_config, fields[b"e"], "lost ack")
        fresh = Envelope(
            recipient="memory/alice",
            body=Add(messages=[Message(role="user", content=said("two"))]),
            id="fresh-command-1",
        )
        unapplied = await add_letter(
            redis_client, redis_config, default_codec.encode_envelope(fresh), "refused"
        )
        # A worker dead-letters a command for a kind nobody registered, by itself.
        await rt.tell("ghost/x", Add(messages=[Message(role="user", content="boo")]))

        async def three() -> bool:
            return bool(await redis_client.xlen(keys.dead_letters()) == 3)

        await eventually(three, "the worker dead-letters the ghost's command")
        await redis_client.xadd(keys.dead_letters(), {b"reason": b"torn", b"e": b"\x93no"})

        listed = await cli("dead-letters", "list", config_file, "--json")
        assert listed.code == 0, listed.err
        rows = json.loads(listed.out)
        assert [r["reason"] for r in rows[:2]] == ["lost ack", "refused"]
        ghost = rows[2]
        assert (ghost["recipient"], ghost["command"]) == ("ghost/x", "Add")
        assert "no actor kind 'ghost' is registered" in ghost["reason"]
        assert rows[3]["undecodable"].startswith("not a valid envelope")
        table = await cli("dead-letters", "list", config_file)
        assert table.code == 0 and "dead letters (4 of 4)" in table.out, table
        assert "ghost/x" in table.out and "refused" in table.out

        shown = await cli("dead-letters", "show", config_file, unapplied, "--json")
        assert shown.code == 0, shown.err
        detail = json.loads(shown.out)
        assert detail["command_id"] == "fresh-command-1"
        assert detail["body"]["messages"][0]["content"] == said("two")
        assert detail["body"]["type"] == "Add"
        torn = (await cli("dead-letters", "show", config_file, rows[3]["id"])).out
        assert "cannot be decoded" in torn

        # Both go back; the one applied already is skipped by its command id.
        requeued = await cli("dead-letters", "requeue", config_file, applied, unapplied)
        assert requeued.code == 0, requeued.err
        assert requeued.out.split() == ["requeued", applied, "requeued", unapplied]

        async def two() -> bool:
            return bool(await alice.size() == 2)

        await eventually(two, "the requeued command is applied")
        # A requeued letter is gone; the ghost's and the torn one hold no command
        # that can be handled: the torn one is left in place, with its reason.
        again = await cli("dead-letters", "requeue", config_file, applied, rows[3]["id"])
        assert again.code == 1
        assert again.err.splitlines() == [
            f"actormem: dead letter {applied}: no such dead letter",
            f"actormem: dead letter {rows[3]['id']}: holds no command that can be requeued "
            "(left in place; reason: torn)",
        ]
        contents = [m.content for m in await alice.get()]
        assert contents == [said("one"), said("two")]
        # A worker handles one more command after the requeued ones: none came twice.
        await alice.add({"role": "user", "content": said("three")})
        assert [m.content for m in await alice.get()] == [said(w) for w in ("one", "two", "three")]

        dropped = await cli("dead-letters", "drop", config_file, ghost["id"], "nope", "1-1")
        assert dropped.code == 1
        assert dropped.out.split() == ["dropped", ghost["id"]]
        assert dropped.err.splitlines() == [
            "actormem: 'nope' is not a dead-letter id (they look like 1732560000000-0; "
            "see 'actormem dead-letters list')",
            "actormem: dead letter 1-1: no such dead letter",
        ]
        left = json.loads((await cli("dead-letters", "list", config_file, "--json")).out)
        assert [r["id"] for r in left] == [rows[3]["id"]]
        unknown = await cli("dead-letters", "show", config_file, ghost["id"])
        assert (unknown.code, unknown.err.strip()) == (
            1,
            f"actormem: dead letter {ghost['id']}: no such dead letter",
        )


async def test_read_only_commands_change_nothing(
    redis_client: aioredis.Redis, redis_config: RedisConfig, config_file: str
) -> None:
    data = default_codec.encode_envelope(Envelope(recipient="memory/bob", body="x", id="c1"))
    letter = await add_letter(redis_client, redis_config, data, "kept")

    async def snapshot() -> dict[bytes, object]:
        keys = sorted([k async for k in redis_client.scan_iter(match=f"{redis_config.prefix}:*")])
        return {k: await redis_client.dump(k) for k in keys}

    before = await snapshot()
    for args in (
        ("dead-letters", "list", config_file),
        ("dead-letters", "list", config_file, "--json"),
        ("dead-letters", "show", config_file, letter),
        ("health", config_file),
        ("inspect", config_file),
        ("inspect", config_file, "--json"),
        ("inspect", config_file, "--agents"),
        ("inspect", config_file, "--agent", "bob"),
        ("inspect", config_file, "--pool"),
    ):
        await cli(*args)
    assert await snapshot() == before
    read_only = (("dead-letters", "list"), ("dead-letters", "show"), ("health",), ("inspect",))
    for command in read_only:
        shown = " ".join((await cli(*command, "--help")).out.split())
        assert "Read-only: it changes nothing stored." in shown, command


async def test_health_of_a_deployment_and_of_one_whose_worker_was_killed(
    redis_config: RedisConfig, config_file: str
) -> None:
    async with deployment(redis_config, config_file, 2) as workers:
        healthy = await cli("health", config_file)
        assert healthy.code == 0, healthy.out + healthy.err
        assert healthy.out.startswith(f"ok: {redis_config.shards} shards owned, 2 workers live")
    async with deployment(redis_config, config_file, 1) as workers:
        assert (await cli("health", config_file)).code == 0
        workers.kill(0)

        async def stale() -> bool:
            return (await cli("health", config_file)).code != 0

        await eventually(stale, "the killed worker's leases go stale")
        sick = await cli("health", config_file)
        assert sick.code == 1
        lines = sick.out.splitlines()
        # Every shard is named: its lease is stale, or gone.
        named = sorted(
            int(line.split()[1].rstrip(":")) for line in lines if line.startswith("shard")
        )
        assert named == list(range(redis_config.shards)), lines
        for line in lines:
            assert line.startswith(("shard", "worker")), line
            if line.startswith("shard"):
                assert line.endswith("no owner") or f"lease of {workers.ids[0]}" in line, line


async def test_health_names_the_shards_of_a_killed_worker_until_they_are_taken_over(
    tmp_path: Path, redis_config: RedisConfig
) -> None:
    # A lease long enough that the reading falls between the killed worker's going
    # silent (two heartbeats) and the survivor's taking over (its lease's expiry).
    config = msgspec.structs.replace(redis_config, lease_ms=6_000, shards=6)
    path = write_config(tmp_path / "long-lease.toml", config)
    async with deployment(config, path, 2) as workers:
        victim = workers.ids[0]
        held = {s for s, w in (await lease_holders(config)).items() if w == victim}
        workers.kill(0)
        seen: list[list[str]] = []

        def named(problems: list[str]) -> set[int]:
            return {
                int(line.split()[1].rstrip(":")) for line in problems if line.startswith("shard ")
            }

        async def all_named() -> bool:
            health = await check_health(config)
            seen.append(health.problems)
            return named(health.problems) == held

        # Its leases were renewed at slightly different moments: each goes stale in turn.
        await eventually(all_named, "every shard of the killed worker is named")
        assert all(named(problems) <= held for problems in seen), seen
        assert f"worker {victim}: last heartbeat" in seen[-1][-1]

        async def healed() -> bool:
            return (await check_health(config)).healthy

        await eventually(healed, "the survivor takes the shards over")
        assert set((await lease_holders(config)).values()) == {workers.ids[1]}
        assert (await cli("health", path)).code == 0


async def test_inspect_shows_owners_workers_and_backlog(
    redis_client: aioredis.Redis, redis_config: RedisConfig, config_file: str
) -> None:
    keys = Keys(redis_config.prefix)
    async with deployment(redis_config, config_file, 2) as workers:
        ran = await cli("inspect", config_file, "--json")
        assert ran.code == 0, ran.err
        status = json.loads(ran.out)
        owners = [shard["owner"] for shard in status["shards"]]
        assert set(owners) == set(workers.ids)
        assert [w["worker"] for w in status["workers"]] == sorted(workers.ids)
        for worker in status["workers"]:
            assert worker["live"] is True
            assert worker["shards"] == [s for s, o in enumerate(owners) if o == worker["worker"]]
        table = await cli("inspect", config_file)
        assert table.code == 0 and "shards" in table.out and "dead letters: 0" in table.out
    # The workers stopped and gave their shards back; entries wait in shard 1's stream,
    # one of them read by a consumer that never acknowledged it.
    stream = keys.stream(1)
    for i in range(3):
        await redis_client.xadd(stream, {b"e": f"entry {i}".encode()})
    await redis_client.xreadgroup(CONSUMER_GROUP, "gone", {stream: ">"}, count=1)
    status = json.loads((await cli("inspect", config_file, "--json")).out)
    assert status["workers"] == []
    # Each wrote its final counters as it stopped; they stay readable for a while.
    assert sorted(c["worker"] for c in status["departed"]) == sorted(workers.ids)
    assert all(c["stopped"] for c in status["departed"])
    assert {shard["owner"] for shard in status["shards"]} == {None}
    one = status["shards"][1]
    assert (one["pending"], one["lag"]) == (1, 2)
    assert one["length"] >= 3
    table = (await cli("inspect", config_file)).out
    assert "no owner" in table and "no worker registered" in table


@contextmanager
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@contextmanager
def closed_port() -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    yield port


async def test_health_and_dead_letters_against_an_unreachable_redis_are_one_line() -> None:
    with closed_port() as port:
        url = f"redis://:hunter2@127.0.0.1:{port}/0"
        refused = await cli("health", "--redis-url", url)
        assert refused.code == 1
        assert refused.out.startswith("redis: ") and len(refused.out.splitlines()) == 1
        assert "Redis unavailable" in refused.out
        listed = await cli("dead-letters", "list", "--redis-url", url)
        assert listed.code == 2 and listed.out == ""
        assert len(listed.err.splitlines()) == 1 and "Redis unavailable" in listed.err
        assert "hunter2" not in refused.out + listed.err
    with silent_port() as port:
        url = f"redis://127.0.0.1:{port}"
        silent = await cli("health", "--redis-url", url, "--timeout", "0.5")
        assert (silent.code, silent.out) == (1, "redis: no answer within 0.5 s\n")


async def test_usage_errors_are_one_line() -> None:
    none = await cli("health")
    assert none.code == 2
    assert none.err == (
        "actormem: error: no config given: name the deployment's Redis with [redis] url "
        "or --redis-url\n"
    )
    bad = await cli("health", "--redis-url", "redis://x", "--timeout", "0")
    assert bad.code == 2 and len(bad.err.splitlines()) == 1 and "seconds > 0" in bad.err
    scheme = await cli("inspect", "--redis-url", "ftp://u:hunter2@x")
    assert scheme.err == (
        "actormem: error: --redis-url ftp://u:***@x: url must be redis://, rediss:// or "
        "unix:// (Redis URL must specify one of the following schemes (redis://, rediss://, "
        "unix://))\n"
    )
    version = await cli("--version")
    assert version.code == 0 and version.out.startswith("actormem ")
