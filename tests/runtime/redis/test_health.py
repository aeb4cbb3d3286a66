"""The health check's reading of a deployment: which shards and workers are a problem."""

from __future__ import annotations

import msgspec
import pytest
import redis.asyncio as aioredis

from actormem.runtime.redis import Keys, RedisConfig
from actormem.runtime.redis._balance import Survey
from actormem.runtime.redis.health import check_health, problems

pytestmark = pytest.mark.anyio

NOW = 1_000_000
LEASE = 3_000  # a heartbeat every second; fresh within two


def survey(leases: dict[int, tuple[str, int]], beats: dict[str, int]) -> Survey:
    """Four shards: ``leases`` maps a shard to (worker, ms its lease has left);
    ``beats`` a worker to how long ago (ms) its last heartbeat was."""
    return Survey(
        now_ms=NOW,
        lease_ms=LEASE,
        registered={w: NOW - ago + LEASE for w, ago in beats.items()},
        leases={s: f"7:{w}" for s, (w, _) in leases.items()},
        shards=4,
        expires_in_ms={s: left for s, (_, left) in leases.items()},
    )


def test_a_deployment_whose_leases_are_all_fresh_is_healthy() -> None:
    fresh = survey({s: ("w1", LEASE - 900) for s in range(4)}, {"w1": 900})
    assert problems(fresh) == []


def test_each_shard_without_a_fresh_owner_and_each_silent_worker_is_one_line() -> None:
    reading = survey(
        {0: ("w1", 2_500), 1: ("w2", 800), 3: ("w2", 700)},
        {"w1": 500, "w2": 2_300},
    )
    assert problems(reading) == [
        "shard 1: lease of w2 not renewed for 2.2 s (expires in 0.8 s)",
        "shard 2: no owner",
        "shard 3: lease of w2 not renewed for 2.3 s (expires in 0.7 s)",
        "worker w2: last heartbeat 2.3 s ago",
    ]


async def test_a_deployment_no_worker_ever_served_has_no_owners(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    await redis_client.set(Keys(redis_config.prefix).lease(2), "3:w9", px=redis_config.lease_ms)
    health = await check_health(msgspec.structs.replace(redis_config, shards=3))
    assert health.problems == ["shard 0: no owner", "shard 1: no owner"]
    assert health.workers == []
    # The check wrote nothing: the one key under the prefix is the lease set above.
    keys = [k async for k in redis_client.scan_iter(match=f"{redis_config.prefix}:*")]
    assert keys == [Keys(redis_config.prefix).lease(2).encode()]


async def test_a_bad_timeout_or_no_url_is_refused(redis_config: RedisConfig) -> None:
    with pytest.raises(ValueError, match="timeout must be > 0 s, got 0"):
        await check_health(redis_config, timeout=0)
    with pytest.raises(ValueError, match="needs a Redis url"):
        await check_health(RedisConfig())
