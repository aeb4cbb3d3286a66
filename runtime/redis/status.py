"""What a running deployment looks like from Redis, read-only: each shard's owner,
lease age and backlog, each registered worker's last heartbeat and counters, the
dead letters; the actors of a kind whose state is stored, and one actor's state.

It reads what the workers write (the registry and leases of ``_leases``, the
shard streams' consumer group, the workers' counters of ``_counters``, the actors'
stored state, the dead-letter stream) and writes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Final

import redis.asyncio as aioredis

from actormem.runtime.redis._balance import holder_of
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis._counters import WorkerCounters, counted_workers, read_counters
from actormem.runtime.redis._dead_letters import count_dead_letters
from actormem.runtime.redis._leases import read_survey
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.keys import CONSUMER_GROUP, Keys, shard_of

__all__ = (
    "DeploymentStatus",
    "ShardStatus",
    "StoredActor",
    "WorkerStatus",
    "read_status",
    "read_stored_actors",
    "read_stored_state",
)

#: Keys asked for per SCAN call, and actors sized per pipeline.
_SCAN_BATCH: Final = 1000
_GLOB: Final = re.compile(r"[\\*?\[\]]")


@dataclass(frozen=True)
class ShardStatus:
    """One shard.

    Attributes:
        shard: its number.
        owner: the worker holding its lease (None: no owner).
        lease_age: seconds since the lease was last renewed (None: no lease).
        length: entries in its stream (handled ones are trimmed in batches).
        pending: entries delivered to its owner and not yet acknowledged.
        lag: entries not yet delivered (None when Redis cannot tell).
    """

    shard: int
    owner: str | None
    lease_age: float | None
    length: int
    pending: int
    lag: int | None


@dataclass(frozen=True)
class WorkerStatus:
    """One registered worker.

    Attributes:
        worker: its id.
        heartbeat_age: seconds since its last heartbeat.
        live: whether that is recent enough for it to count (two heartbeats).
        shards: the shards whose lease it holds.
        counters: what it handled, rejected, failed, restarted and dead-lettered
            since it started, as it last wrote them (None: it wrote none yet).
    """

    worker: str
    heartbeat_age: float
    live: bool
    shards: list[int]
    counters: WorkerCounters | None = None


@dataclass(frozen=True)
class DeploymentStatus:
    """A deployment's shards, workers and dead letters, as read at one moment.

    ``departed`` holds the last counters of workers no longer registered (stopped,
    or silent for a lease), for as long as Redis keeps them.
    """

    shards: list[ShardStatus]
    workers: list[WorkerStatus]
    dead_letters: int
    departed: list[WorkerCounters] = field(default_factory=list)


@dataclass(frozen=True)
class StoredActor:
    """One actor whose state is stored.

    Attributes:
        address: ``kind/key``.
        shard: the shard it lives on.
        log_entries: entries in its append-only log.
        snapshot_bytes: the size of its snapshot (0: none stored).
    """

    address: str
    shard: int
    log_entries: int
    snapshot_bytes: int


async def read_status(client: aioredis.Redis, config: RedisConfig) -> DeploymentStatus:
    """Read the deployment ``config`` names (read-only).

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    keys = Keys(config.prefix)
    survey = await read_survey(client, keys, config.shards, config.lease_ms)
    streams = [keys.stream(shard) for shard in range(config.shards)]
    with redis_errors("reading the shard streams"):
        async with client.pipeline(transaction=False) as pipe:
            for stream in streams:
                pipe.xlen(stream)
                pipe.xinfo_groups(stream)
            # A stream nobody wrote to yet has no group (XINFO answers "no such key").
            replies = await pipe.execute(raise_on_error=False)
    shards: list[ShardStatus] = []
    for shard in range(config.shards):
        length, groups = replies[2 * shard], replies[2 * shard + 1]
        group = _group(groups)
        value = survey.leases.get(shard)
        left = survey.expires_in_ms.get(shard)
        shards.append(
            ShardStatus(
                shard=shard,
                owner=holder_of(value) if value is not None else None,
                lease_age=(config.lease_ms - left) / 1000 if left is not None else None,
                length=length if isinstance(length, int) else 0,
                pending=int(group.get("pending", 0)),
                lag=_lag(group, length),
            )
        )
    live = set(survey.live())
    known = sorted(set(survey.registered) | set(await counted_workers(client, keys)))
    counters = await read_counters(client, keys, known)
    workers = [
        WorkerStatus(
            worker=worker,
            heartbeat_age=(survey.now_ms - survey.last_beat(worker)) / 1000,
            live=worker in live,
            shards=[s.shard for s in shards if s.owner == worker],
            counters=counters.get(worker),
        )
        for worker in sorted(survey.registered)
    ]
    departed = [counters[w] for w in known if w not in survey.registered and w in counters]
    dead = await count_dead_letters(client, config)
    return DeploymentStatus(shards, workers, dead, departed)


def _glob(text: str) -> str:
    """``text`` as a SCAN pattern that matches only itself."""
    return _GLOB.sub(r"\\\g<0>", text)


async def read_stored_actors(
    client: aioredis.Redis, config: RedisConfig, kind: str
) -> list[StoredActor]:
    """Every actor of ``kind`` whose state (log or snapshot) is stored, by address.

    Read-only: a SCAN over the prefix's actor keys, then one pipelined round of
    ``LLEN`` and ``STRLEN``.

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    keys = Keys(config.prefix)
    shape = re.compile(
        re.escape(config.prefix) + r":\{s(\d+)\}:agent:(" + re.escape(kind) + r"/.+):(log|snap)"
    )
    pattern = f"{_glob(config.prefix)}:{{s*}}:agent:{_glob(kind)}/*"
    found: dict[str, int] = {}
    with redis_errors(f"listing the stored {kind} actors"):
        async for raw in client.scan_iter(match=pattern, count=_SCAN_BATCH):
            match = shape.fullmatch(raw.decode(errors="replace"))
            if match is not None and int(match[1]) < config.shards:
                found[match[2]] = int(match[1])
        addresses = sorted(found)
        sizes: list[Any] = []
        for start in range(0, len(addresses), _SCAN_BATCH):
            async with client.pipeline(transaction=False) as pipe:
                for address in addresses[start : start + _SCAN_BATCH]:
                    pipe.llen(keys.actor_log(found[address], address))
                    pipe.strlen(keys.actor_snapshot(found[address], address))
                sizes += await pipe.execute()
    return [
        StoredActor(address, found[address], int(sizes[2 * i]), int(sizes[2 * i + 1]))
        for i, address in enumerate(addresses)
    ]


async def read_stored_state(
    client: aioredis.Redis, config: RedisConfig, address: str
) -> tuple[bytes | None, list[bytes]] | None:
    """The stored state of the actor at ``address``: its snapshot (None: none) and
    its log, as the transport hands them to ``durable_restore`` on activation; None
    when nothing is stored. Read-only: the actor is not activated.

    Raises:
        TransportUnavailableError: Redis did not answer.
        TransportError: Redis refused.
    """
    keys = Keys(config.prefix)
    shard = shard_of(address, config.shards)
    with redis_errors(f"reading the stored state of {address}"):
        async with client.pipeline(transaction=False) as pipe:
            pipe.get(keys.actor_snapshot(shard, address))
            pipe.lrange(keys.actor_log(shard, address), 0, -1)
            snapshot, log = await pipe.execute()
    if snapshot is None and not log:
        return None
    return snapshot, list(log)


def _group(groups: Any) -> dict[str, Any]:
    """The workers' consumer group among a stream's groups (empty if it has none)."""
    if not isinstance(groups, list):
        return {}
    for group in groups:
        name = group.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == CONSUMER_GROUP:
            return dict(group)
    return {}


def _lag(group: dict[str, Any], length: Any) -> int | None:
    """Entries not yet delivered to the group: all of them when it has none yet."""
    if not group:
        return length if isinstance(length, int) else 0
    lag = group.get("lag")
    return int(lag) if lag is not None else None
