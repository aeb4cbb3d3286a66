"""A worker killed after its commit stored a command, before its outbox wrote the
tells and forwards the command's handler sent.

The worker runs with the test-only fault hook (``ACTORMEM_FAULT_KILL_WITH_UNSENT``):
its outbox stops writing after a number of entries, and the worker SIGKILLs itself
right after a commit that stored (and acked) commands whose tells that outbox will
never write. A worker started again in its place sends them again from the shard's
unsent hash. The checker reads what every ledger stored: each tell and forward
applied once, in the order its relay handled the commands.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import anyio
import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime import Runtime
from actormem.runtime.redis import Keys, RedisConfig, default_codec
from actormem.runtime.redis._unsent import FAULT_ENV
from actormem.runtime.redis.worker import WorkerProcesses
from tests.faults.report import Recorder, full_size
from tests.support.actors import Pass
from tests.support.history import Applied, History
from tests.support.streams import client_runtime, eventually, stored_tokens

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

REGISTER = "tests.support.actors:register"
RELAYS = [f"ledger/relay{i}" for i in range(6)]
SINKS = [f"ledger/sink{i}" for i in range(3)]
#: A stored unsent tell: command entry, place, stream, data, deadline.
_record = msgspec.msgpack.Decoder(tuple[str, int, str, bytes, float | None])


async def send_passes(rt: Runtime, sinks: History, relays: History, start: int, count: int) -> None:
    """Tell ``count`` Pass commands round-robin over the relays: odd ones forwarded,
    even ones recorded by the relay and told on; each relay feeds one sink."""
    for n in range(start, start + count):
        i = n % len(RELAYS)
        relay, sink, token = RELAYS[i], SINKS[i % len(SINKS)], f"p{n}"
        forward = n % 2 == 1
        sinks.sent(token, sink, token, producer=relay)
        if not forward:
            relays.sent(token, relay, token)
        await rt.ref(relay).tell(Pass(token, sink, forward=forward))
    await rt.transport.flush()  # type: ignore[attr-defined]


async def unsent_tokens(client: aioredis.Redis, config: RedisConfig) -> tuple[set[str], set[str]]:
    """The ids of the tells the unsent hashes hold, and the tokens of those that are
    in no shard stream (the outbox never wrote them: lost, but for the hash)."""
    keys = Keys(config.prefix)
    written: set[str] = set()
    kept: dict[str, str] = {}
    for shard in range(config.shards):
        for _, fields in await client.xrange(keys.stream(shard)):
            written.add(default_codec.decode_envelope(fields[b"e"]).id)
        stored = await client.hgetall(keys.unsent(shard))  # type: ignore[misc]
        for tell, record in stored.items():
            data = _record.decode(record)[3]
            kept[tell.decode()] = default_codec.decode_envelope(data).body.token
    return set(kept), {token for tell, token in kept.items() if tell not in written}


def applied(stored: dict[str, list[str]], tokens: Iterable[str]) -> bool:
    found = {t for log in stored.values() for t in log}
    return all(t in found for t in tokens)


@pytest.mark.timeout(600)
async def test_tells_and_forwards_stored_unsent_survive_a_worker_killed_before_writing_them(
    redis_client: aioredis.Redis, redis_config: RedisConfig, fault_report: Recorder
) -> None:
    kills, after = (4, 400) if full_size() else (2, 50)
    # A handler waiting on the stopped outbox is killed with its worker each time: its
    # entry must not count as poison (handling started and never returned) before
    # the last kill, so the deliveries allowed exceed the kills.
    redis_config = redis_config.replace(max_deliveries=kills + 2)
    chunk = 2 * after
    sinks, relays = History(), History()
    kept: set[str] = set()
    lost: set[str] = set()
    sent = 0
    env = {FAULT_ENV: str(after)}
    async with (
        WorkerProcesses(1, redis_config, REGISTER, log_level="warning", env=env) as workers,
        client_runtime(redis_config) as rt,
    ):

        async def died() -> bool:
            return workers.pid(0) is None

        for kill in range(kills):
            # The worker (started again with the fault armed, but the last time) dies
            # in this chunk, if it did not already while sending the kept tells again.
            await send_passes(rt, sinks, relays, sent, chunk)
            sent += chunk
            await eventually(died, "the worker killed itself with tells unsent", limit=120.0)
            kept_now, never_written = await unsent_tokens(redis_client, redis_config)
            kept |= kept_now
            lost |= never_written
            if kill == kills - 1:
                workers.env.pop(FAULT_ENV)
            restarted = time.monotonic()
            workers.start(0)
            await workers.wait_ready([0])

        async def recovered() -> bool:
            return applied(await stored_tokens(redis_client, redis_config, SINKS), lost)

        await eventually(recovered, "the tells kept unsent are applied", limit=120.0)
        recovery = time.monotonic() - restarted
        await send_passes(rt, sinks, relays, sent, chunk)
        sent += chunk

        async def done() -> bool:
            stored = await stored_tokens(redis_client, redis_config, SINKS)
            return sum(map(len, stored.values())) >= sent

        await eventually(done, "every tell and forward applied", limit=120.0)
        await anyio.sleep(1.0)  # a late duplicate would land now
        at_sinks = await stored_tokens(redis_client, redis_config, SINKS)
        at_relays = await stored_tokens(redis_client, redis_config, RELAYS)
        keys = Keys(redis_config.prefix)
        shards = range(redis_config.shards)
        left = sum([await redis_client.hlen(keys.unsent(s)) for s in shards])  # type: ignore[misc]
        dead_letters = await redis_client.xlen(keys.dead_letters())
    verdict = sinks.check({a: [Applied(t) for t in log] for a, log in at_sinks.items()})
    fault_report.row(
        "worker SIGKILLed after a commit, before its outbox wrote the tells and forwards",
        f"1 worker, 6 relays -> 3 ledgers, {kills} kills; {len(kept)} tells kept unsent "
        f"at the kills, {len(lost)} of them never written",
        verdict,
        recovery_s=recovery,
    )
    assert verdict.ok, str(verdict)
    relayed = relays.check({a: [Applied(t) for t in log] for a, log in at_relays.items()})
    assert relayed.ok, str(relayed)
    # The kills hit the window: tells acked with their command and never written.
    assert lost
    assert left == 0  # every kept tell deleted once written
    assert dead_letters == 0
