"""What a running deployment looks like from Redis, read-only: each shard's owner,
lease age and backlog, each registered worker's last heartbeat, the dead letters.

It reads what the workers write (the registry and leases of ``_leases``, the
shard streams' consumer group, the dead-letter stream) and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from actormem.runtime.redis._balance import holder_of
from actormem.runtime.redis._client import redis_errors
from actormem.runtime.redis._dead_letters import count_dead_letters
from actormem.runtime.redis._leases import read_survey
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.keys import CONSUMER_GROUP, Keys

__all__ = ("DeploymentStatus", "ShardStatus", "WorkerStatus", "read_status")


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
    """

    worker: str
    heartbeat_age: float
    live: bool
    shards: list[int]


@dataclass(frozen=True)
class DeploymentStatus:
    """A deployment's shards, workers and dead letters, as read at one moment."""

    shards: list[ShardStatus]
    workers: list[WorkerStatus]
    dead_letters: int


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
    workers = [
        WorkerStatus(
            worker=worker,
            heartbeat_age=(survey.now_ms - survey.last_beat(worker)) / 1000,
            live=worker in live,
            shards=[s.shard for s in shards if s.owner == worker],
        )
        for worker in sorted(survey.registered)
    ]
    return DeploymentStatus(shards, workers, await count_dead_letters(client, config))


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
