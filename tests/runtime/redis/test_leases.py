"""Shard leases: a worker's heartbeat renews what it holds and drops what it lost,
counts only live workers in the fair share, takes back its previous run's leases,
and a new worker starts serving soon after it starts."""

from __future__ import annotations

import time
from typing import Any

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from actormem.runtime import Actor, Runtime
from actormem.runtime.redis import Keys, RedisConfig, RedisTransport, shard_of
from actormem.runtime.redis._balance import Survey
from actormem.runtime.redis._leases import LeaseManager
from actormem.runtime.redis.config import DEFAULT_LEASE_MS
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState
from tests.support.actors import register as register_ledger
from tests.support.redis import OTHER_HOLDER, hold_lease_elsewhere, prefixed_client
from tests.support.streams import client_runtime, eventually

pytestmark = pytest.mark.anyio


async def test_one_heartbeat_renews_every_held_lease_and_drops_only_the_lost_one(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    await _renews_all_but_the_lost(redis_client, Keys(redis_config.prefix))


@pytest.mark.slow
async def test_leases_on_many_cluster_nodes_are_renewed_together(
    redis_cluster_url: str, redis_config: RedisConfig
) -> None:
    config = msgspec.structs.replace(redis_config, url=redis_cluster_url, cluster=True)
    async with prefixed_client(config) as client:
        await _renews_all_but_the_lost(client, Keys(config.prefix))


async def _renews_all_but_the_lost(redis_client: aioredis.Redis, keys: Keys) -> None:
    shards, lease_ms = 8, 5_000
    gained: list[int] = []
    lost: list[tuple[list[int], bool]] = []

    async def on_gained(shard: int, _lease: str) -> None:
        gained.append(shard)

    async def on_lost(numbers: list[int], released: bool) -> None:
        lost.append((numbers, released))

    leases = LeaseManager(redis_client, keys, "w1", shards, lease_ms, on_gained, on_lost)
    await leases.heartbeat()
    assert sorted(gained) == list(range(shards))
    # Another worker takes shard 3 over; the others' leases run low.
    await redis_client.set(keys.lease(3), OTHER_HOLDER)
    for shard in range(shards):
        if shard != 3:
            await redis_client.pexpire(keys.lease(shard), 100)
    await leases.heartbeat()
    assert lost == [([3], False)]
    assert sorted(leases.owned) == [s for s in range(shards) if s != 3]
    for shard in leases.owned:
        assert leases.fresh(shard)
        assert await redis_client.pttl(keys.lease(shard)) > 1_000
    assert await redis_client.get(keys.lease(3)) == OTHER_HOLDER.encode()
    assert not leases.fresh(3)


class Changes:
    """What a lease manager reports: shards gained, and shards lost or given back."""

    def __init__(self) -> None:
        self.gained: list[tuple[int, str]] = []
        self.lost: list[tuple[list[int], bool]] = []

    async def on_gained(self, shard: int, lease: str) -> None:
        self.gained.append((shard, lease))

    async def on_lost(self, numbers: list[int], released: bool) -> None:
        self.lost.append((numbers, released))

    def manager(self, client: aioredis.Redis, keys: Keys, worker: str) -> LeaseManager:
        return LeaseManager(client, keys, worker, SHARDS, LEASE_MS, self.on_gained, self.on_lost)


SHARDS, LEASE_MS = 8, 9_000


async def register(client: aioredis.Redis, keys: Keys, worker: str, beat_ago_ms: float) -> None:
    """Put ``worker`` in the registry as if its last heartbeat was ``beat_ago_ms`` ago."""
    last = time.time() * 1000 - beat_ago_ms
    await client.zadd(keys.workers(), {worker: int(last + LEASE_MS)})


async def test_a_worker_silent_for_two_heartbeats_does_not_shrink_the_share(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    changes = Changes()
    # A worker that died 2.5 heartbeats ago is still registered (for a lease).
    await register(redis_client, keys, "dead", beat_ago_ms=2.5 * LEASE_MS / 3)
    # One that beat half a heartbeat ago counts: the two share the shards.
    await register(redis_client, keys, "alive", beat_ago_ms=LEASE_MS / 6)
    leases = changes.manager(redis_client, keys, "w1")
    await leases.heartbeat()
    assert len(leases.owned) == SHARDS // 2
    await redis_client.zrem(keys.workers(), "alive")
    await leases.heartbeat()
    assert sorted(leases.owned) == list(range(SHARDS))
    assert changes.lost == []


async def test_a_worker_gives_back_shards_beyond_its_share_when_a_live_worker_joins(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    one, two = Changes(), Changes()
    first = one.manager(redis_client, keys, "w1")
    await first.heartbeat()
    assert len(first.owned) == SHARDS
    second = two.manager(redis_client, keys, "w2")
    await second.heartbeat(acquire=False)  # registered, nothing to take yet
    await first.heartbeat()
    assert [released for _, released in one.lost] == [True]
    assert len(first.owned) == SHARDS // 2
    await second.heartbeat()
    assert sorted([*first.owned, *second.owned]) == list(range(SHARDS))


async def test_a_worker_started_again_under_its_id_takes_its_leases_back_with_new_tokens(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    keys = Keys(redis_config.prefix)
    before, after, other = Changes(), Changes(), Changes()
    previous = before.manager(redis_client, keys, "w1")
    await previous.heartbeat()
    old = dict(previous.owned)
    # The process dies without a word; its successor under the same id takes the
    # leases back in its first round, before they could expire.
    successor = after.manager(redis_client, keys, "w1")
    await successor.heartbeat(acquire=False)
    assert sorted(successor.owned) == sorted(old)
    for shard, value in successor.owned.items():
        token, _, worker = value.partition(":")
        assert worker == "w1"
        assert int(token) > int(old[shard].partition(":")[0])
        assert await redis_client.get(keys.lease(shard)) == value.encode()
    # The old values are fenced off: the previous run cannot renew them.
    await previous.heartbeat()
    assert previous.owned == {}
    assert [(sorted(shards), released) for shards, released in before.lost] == [
        (sorted(old), False)
    ]
    # Another worker's leases are never taken back, only its own.
    stranger = other.manager(redis_client, keys, "w2")
    await stranger.heartbeat(acquire=False)
    assert stranger.owned == {}


async def test_a_worker_id_started_a_third_time_within_a_lease_sits_out_and_frees_its_shards(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # A crash loop must not hold its shards: its third start gives them back.
    keys = Keys(redis_config.prefix)
    runs = [Changes().manager(redis_client, keys, "w1") for _ in range(3)]
    await runs[0].heartbeat()
    await runs[1].heartbeat(acquire=False)
    assert sorted(runs[1].owned) == list(range(SHARDS))
    with capture_logs() as logs:
        await runs[2].heartbeat(acquire=False)
    assert [e["starts"] for e in logs if e["event"] == "worker_restarting_in_a_loop"] == [3]
    assert [await redis_client.get(keys.lease(s)) for s in range(SHARDS)] == [None] * SHARDS
    assert await redis_client.zscore(keys.workers(), "w1") is None
    # It takes nothing for a lease; a live worker takes every shard at once.
    assert await runs[2].heartbeat() > 0
    assert runs[2].owned == {}
    other = Changes().manager(redis_client, keys, "w2")
    await other.heartbeat()
    assert sorted(other.owned) == list(range(SHARDS))


def survey(registered: dict[str, float], leases: dict[int, str]) -> Survey:
    """A survey at time 0 with workers whose last heartbeats were at the given times."""
    return Survey(
        now_ms=0,
        lease_ms=LEASE_MS,
        registered={w: int(beat + LEASE_MS) for w, beat in registered.items()},
        leases=leases,
        shards=SHARDS,
    )


def test_the_share_counts_only_workers_whose_heartbeat_is_recent() -> None:
    beat = LEASE_MS / 3
    seen = survey({"a": 0, "b": -1.9 * beat, "c": -2.1 * beat}, {})
    assert sorted(seen.live()) == ["a", "b"]
    assert seen.share() == SHARDS // 2
    assert seen.surplus(6) == 2
    assert seen.surplus(3) == 0


def test_a_worker_below_its_share_looks_again_when_a_shard_should_free_up() -> None:
    beat = LEASE_MS / 3
    # "b" holds 6 of 8 (over its share of 4), last beat a third of a heartbeat ago:
    # it gives shards back at its next heartbeat, two thirds of one from now.
    over = survey({"a": 0, "b": -beat / 3}, {s: "1:b" for s in range(6)})
    assert over.next_round("a", 0) == pytest.approx((2 * beat / 3 + 100) / 1000)
    # A worker at or above its share waits a heartbeat.
    assert over.next_round("b", 6) == pytest.approx(beat / 1000)
    # "b" went silent two and a half heartbeats ago: its leases expire in half a one.
    silent = survey({"a": 0, "b": -2.5 * beat}, {s: "1:b" for s in range(4, 8)})
    assert silent.next_round("a", 4) == pytest.approx((beat / 2 + 100) / 1000)
    # A holder gone from the registry: its leases expire any moment.
    gone = survey({"a": 0}, {0: "1:gone"})
    assert gone.next_round("a", 0) == pytest.approx(0.1)


async def test_a_new_worker_handles_its_first_command_soon_after_it_starts(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the default lease (a heartbeat is 3.3 s) the first shards are taken in the
    # round after the short first pause, not a heartbeat later: the waiting command is
    # handled while the worker has made two rounds.
    config = msgspec.structs.replace(redis_config, lease_ms=DEFAULT_LEASE_MS)
    address = "ledger/early"
    log = Keys(config.prefix).actor_log(shard_of(address, config.shards), address)
    rounds = _heartbeat_rounds(monkeypatch)
    async with client_runtime(config) as client:
        await client.ref(address).tell(Add("t0"))
        await client.transport.flush()  # type: ignore[attr-defined]
        rounds.clear()  # the client takes no shards: only the worker's rounds count

        async def handled() -> bool:
            return await redis_client.llen(log) == 1  # type: ignore[no-any-return,misc]

        async with worker(redis_client, config):
            await eventually(handled, "the new worker handles the waiting command")
            assert rounds == [False, True]


@pytest.mark.parametrize("embedded", [True, False], ids=["embedded", "shared"])
async def test_a_worker_alone_on_its_embedded_server_takes_its_shards_in_its_first_round(
    embedded: bool,
    redis_url: str,
    redis_config: RedisConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No other worker can reach an embedded server its transport started, so the
    worker's first round takes the shards; on a server given to it, the first round
    only registers (workers started together then see each other first)."""
    rounds = _heartbeat_rounds(monkeypatch)
    config = msgspec.structs.replace(redis_config, url=None if embedded else redis_url)
    transport = RedisTransport(None, config)
    async with Runtime(transport=transport) as rt:
        register_ledger(rt)
        await rt.ref("ledger/first").tell(Add("t0"))
        assert (await rt.ref("ledger/first").ask(GetState())).tokens == ["t0"]
    assert rounds[0] is embedded
    assert True in rounds


async def test_a_lease_gained_as_the_worker_closes_is_given_back_unserved(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving forced: a shard's lease is taken while the runtime closes (the
    reply came before the cancellation reached the lease loop). The worker closes
    without error, does not serve the shard and gives its lease back."""
    keys = Keys(redis_config.prefix)
    shard = 2
    await hold_lease_elsewhere(redis_client, redis_config, shard, None)
    reached, proceed = anyio.Event(), anyio.Event()
    evalsha = redis_client.evalsha

    async def acquire_after_close_began(sha: str, numkeys: int, *args: Any) -> Any:
        if args[0] == keys.lease(shard):
            reached.set()
            with anyio.CancelScope(shield=True):
                await proceed.wait()
                return await evalsha(sha, numkeys, *args)
        return await evalsha(sha, numkeys, *args)

    monkeypatch.setattr(redis_client, "evalsha", acquire_after_close_began)
    with capture_logs() as logs:
        async with worker(redis_client, redis_config) as rt:
            await eventually(lambda: _holds(rt, 3), "the worker holds the other shards")
            await redis_client.delete(keys.lease(shard))  # free: the next round takes it
            with anyio.fail_after(10):
                await reached.wait()
            # Nothing is waiting in the mailboxes, so aclose reaches its first await
            # with the task group closed to new tasks; only then does the lease come.
            proceed.set()
            await rt.aclose()
    acquired = [e for e in logs if e["event"] == "shard_acquired" and e["shard"] == shard]
    assert len(acquired) == 1
    assert await redis_client.get(keys.lease(shard)) is None
    assert [e["shard"] for e in logs if e["event"] == "shard_gained_while_closing"] == [shard]


async def test_a_closing_worker_takes_no_more_shards_while_its_mailboxes_drain(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler holds the runtime in its drain and frees a shard then; the lease
    rounds that follow renew what the worker holds and leave the free shard alone."""
    keys = Keys(redis_config.prefix)
    shard = 2
    await hold_lease_elsewhere(redis_client, redis_config, shard, None)
    entered, closing, freed, round_done = (anyio.Event() for _ in range(4))
    acquiring: list[bool] = []
    heartbeat = LeaseManager.heartbeat

    async def observed(self: LeaseManager, *, acquire: bool = True) -> float:
        after_freed = freed.is_set()
        wait = await heartbeat(self, acquire=acquire)
        if after_freed:
            acquiring.append(acquire)
            round_done.set()
        return wait

    class Held(Actor):
        async def receive(self, message: Any) -> Any:
            entered.set()
            await closing.wait()
            await redis_client.delete(keys.lease(shard))
            freed.set()
            with anyio.fail_after(10):
                await round_done.wait()

    monkeypatch.setattr(LeaseManager, "heartbeat", observed)
    address = next(f"held/{i}" for i in range(100) if shard_of(f"held/{i}", 4) != shard)
    with capture_logs() as logs:
        async with worker(redis_client, redis_config) as rt:
            rt.register("held", Held)
            await eventually(lambda: _holds(rt, 3), "the worker holds the other shards")
            await rt.ref(address).tell("hold")
            with anyio.fail_after(10):
                await entered.wait()
            # aclose marks the runtime closing before it first waits (for the handler).
            closing.set()
            await rt.aclose()
    assert acquiring and not any(acquiring)
    assert not [e for e in logs if e["event"] == "shard_acquired" and e["shard"] == shard]


async def _holds(rt: Runtime, count: int) -> bool:
    return len(rt.transport.owned_shards()) == count  # type: ignore[attr-defined]


async def test_a_lease_taken_as_its_round_is_cancelled_is_known_and_given_back(
    redis_client: aioredis.Redis, redis_config: RedisConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving forced: the lease loop is cancelled (its runtime closes) after
    an ACQUIRE reached Redis and before its reply was read. The worker still knows
    the lease, so closing gives it back rather than leaving it held until it expires."""
    keys = Keys(redis_config.prefix)
    changes = Changes()
    leases = changes.manager(redis_client, keys, "w1")
    evalsha = redis_client.evalsha
    with anyio.CancelScope() as round_scope:

        async def reply_cut_off(sha: str, numkeys: int, *args: Any) -> Any:
            with anyio.CancelScope(shield=True):
                reply = await evalsha(sha, numkeys, *args)  # Redis has run it
            round_scope.cancel()
            await anyio.lowlevel.checkpoint()  # where the cancellation lands
            return reply

        monkeypatch.setattr(redis_client, "evalsha", reply_cut_off)
        await leases.heartbeat()
    held = [s for s in range(SHARDS) if await redis_client.get(keys.lease(s)) is not None]
    assert held and held == sorted(leases.owned)
    await leases.release_all()
    assert [await redis_client.get(keys.lease(s)) for s in range(SHARDS)] == [None] * SHARDS


def _heartbeat_rounds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Note each heartbeat round's ``acquire`` (whether it may take free shards)."""
    rounds: list[bool] = []
    heartbeat = LeaseManager.heartbeat

    async def noted(self: LeaseManager, *, acquire: bool = True) -> float:
        rounds.append(acquire)
        return await heartbeat(self, acquire=acquire)

    monkeypatch.setattr(LeaseManager, "heartbeat", noted)
    return rounds
