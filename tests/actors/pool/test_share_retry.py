"""A pool command whose reply is lost is sent again as a new command: its first
recipient (the agent's memory) only hands it on and keeps no reply, and the pool
applies it once by the command's own key."""

from __future__ import annotations

from typing import Any

import pytest

from actormem.actors import MemoryRuntime
from actormem.actors.config import AppConfig
from actormem.actors.pool.commands import Share
from actormem.runtime.redis import RedisConfig, RedisTransport
from tests.runtime.redis.test_kept_replies import drop_replies

pytestmark = pytest.mark.anyio


async def test_a_share_whose_reply_was_lost_is_answered_and_applied_once(
    redis_config: RedisConfig,
) -> None:
    transport = RedisTransport(redis_config.url, redis_config)
    async with MemoryRuntime(AppConfig(), transport=transport) as rt:
        shares = 0

        def first_share(body: Any) -> bool:
            nonlocal shares
            shares += isinstance(body, Share)
            return isinstance(body, Share) and shares == 1

        dropped = drop_replies(rt, first_share)
        amy = rt.memory("amy", timeout=10)
        result = await amy.share("the vault code is 4711", topic="vault")
        assert len(dropped) == 1
        assert result.status == "new"
        assert result.insight.id == dropped[0].id
        held = await amy.insights(topic="vault")
        assert [i.text for i in held] == ["the vault code is 4711"]
        assert transport.stats().asks_resent >= 1
