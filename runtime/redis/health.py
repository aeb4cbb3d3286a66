"""Whether a deployment is healthy, as a container probe asks it: read-only.

A deployment is healthy when Redis answers within a bound and every shard has an
owner whose lease is fresh: renewed within the last two heartbeats, the same
window in which the balancing counts a worker as live (``_balance``). A problem
is one line: ``shard 3: no owner``, ``shard 5: lease of w1 not renewed for 4.2 s
(expires in 0.8 s)``, ``worker w1: last heartbeat 4.2 s ago``, ``redis: no answer
within 1.0 s``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

import anyio

from actormem.runtime.errors import TransportError
from actormem.runtime.redis._balance import FRESH_INTERVALS, Survey, holder_of
from actormem.runtime.redis._client import check_server, connect
from actormem.runtime.redis._leases import read_survey
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.keys import Keys

__all__ = ("DEFAULT_HEALTH_TIMEOUT", "Health", "check_health", "problems")

#: Seconds Redis has to answer a health check (the connection, the checks, the reads).
DEFAULT_HEALTH_TIMEOUT: Final = 1.0


@dataclass(frozen=True)
class Health:
    """What a health check found.

    Attributes:
        problems: one line per problem; none means healthy.
        shards: the deployment's number of shards.
        workers: the workers with a recent heartbeat.
        seconds: how long Redis took to answer the whole check (None if it did not).
    """

    problems: list[str]
    shards: int
    workers: list[str]
    seconds: float | None

    @property
    def healthy(self) -> bool:
        """True when there is no problem."""
        return not self.problems


def problems(survey: Survey) -> list[str]:
    """The problems one reading shows, one line each (none: healthy).

    Each shard needs a lease renewed within ``FRESH_INTERVALS`` heartbeats (a lease
    whose time left was not read counts as fresh); each registered worker needs a
    heartbeat that recent too (a worker that stops cleanly leaves the registry).
    """
    stale_ms = FRESH_INTERVALS * survey.interval_ms
    found: list[str] = []
    for shard in range(survey.shards):
        value = survey.leases.get(shard)
        if value is None:
            found.append(f"shard {shard}: no owner")
            continue
        left = survey.expires_in_ms.get(shard)
        if left is not None and survey.lease_ms - left > stale_ms:
            found.append(
                f"shard {shard}: lease of {holder_of(value)} not renewed for "
                f"{(survey.lease_ms - left) / 1000:.1f} s (expires in {left / 1000:.1f} s)"
            )
    live = set(survey.live())
    for worker in sorted(set(survey.registered) - live):
        ago = (survey.now_ms - survey.last_beat(worker)) / 1000
        found.append(f"worker {worker}: last heartbeat {ago:.1f} s ago")
    return found


async def check_health(config: RedisConfig, *, timeout: float = DEFAULT_HEALTH_TIMEOUT) -> Health:
    """Check the deployment ``config`` names.

    Read-only: it registers nothing and writes no key. Redis failing to answer
    within ``timeout`` seconds, refusing the connection or the credentials, or
    allowing eviction, is one problem line starting ``redis:``.

    Args:
        config: the deployment's ``[redis]`` section (its url, prefix, shards and
            lease time).
        timeout: how long Redis has to answer everything the check asks.

    Raises:
        ValueError: the config names no Redis url, or ``timeout`` is not positive.
    """
    if not config.url:
        raise ValueError("a health check needs a Redis url ([redis] url)")
    if not timeout > 0:
        raise ValueError(f"the health check's timeout must be > 0 s, got {timeout}")
    client = connect(config.replace(socket_timeout=timeout), connections=1)
    started = time.perf_counter()
    try:
        with anyio.move_on_after(timeout) as scope:
            await check_server(client, config)
            survey = await read_survey(client, Keys(config.prefix), config.shards, config.lease_ms)
        if scope.cancelled_caught:
            return _unanswered(config, f"redis: no answer within {timeout:g} s")
    except TransportError as exc:
        return _unanswered(config, f"redis: {exc}")
    finally:
        with anyio.CancelScope(shield=True):
            await client.aclose()
    seconds = time.perf_counter() - started
    return Health(problems(survey), config.shards, sorted(survey.live()), seconds)


def _unanswered(config: RedisConfig, line: str) -> Health:
    return Health([line], config.shards, [], None)
