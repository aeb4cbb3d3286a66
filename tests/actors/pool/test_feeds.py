"""Ranked feeds and pool partitions: what each subscriber gets per tick, and how
the pool's partitions share their insights."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from actormem.actors.app.wiring import MemoryRuntime
from actormem.actors.config import AppConfig
from actormem.actors.errors import MemoryInputError
from actormem.actors.pool.commands import (
    PeerForgot,
    PeerShared,
    partition_of,
    pool_address,
    pool_addresses,
)
from actormem.actors.pool.config import FeedConfig, PoolConfig
from actormem.actors.pool.feeds import Feeds
from actormem.actors.pool.insights import Insight, InsightSignatureError
from actormem.runtime import Transport
from actormem.runtime.config import decode_config
from actormem.runtime.errors import ConfigError
from actormem.runtime.redis.transport import RedisTransport

pytestmark = pytest.mark.anyio


def _insight(key: str, text: str, source: str = "src", topic: str = "town") -> Insight:
    return Insight(id=key, text=text, topic=topic, importance=0.5, source=source, created=0.0)


def _everything(agent: str) -> None:
    return None


def _fed(feeds: Feeds, agents: list[str]) -> dict[str, list[str]]:
    return {a: [i.id for i in got] for a, got in feeds.feed(agents, _everything)}


def _only(**weights: float) -> FeedConfig:
    """A feed ranked by the named parts alone."""
    zero = {"relevance": 0.0, "recency": 0.0, "social": 0.0, "popularity": 0.0}
    return FeedConfig(**{**zero, **weights})  # type: ignore[arg-type]


def test_a_tick_sends_at_most_size_new_insights_never_ones_own_or_had() -> None:
    feeds = Feeds(FeedConfig(size=3))
    for n in range(10):
        feeds.add(_insight(f"i{n}", f"news number {n} about the mill", source=f"s{n % 2}"))
    first = _fed(feeds, ["s0", "reader"])
    assert len(first["reader"]) == 3
    assert len(first["s0"]) == 3
    assert all(int(k[1:]) % 2 == 1 for k in first["s0"])  # none of its own
    second = _fed(feeds, ["reader"])
    assert len(second["reader"]) == 3
    assert not set(first["reader"]) & set(second["reader"])  # none it had


def test_topics_still_filter() -> None:
    feeds = Feeds(FeedConfig(size=5))
    feeds.add(_insight("a", "the harbour is closed", topic="harbour"))
    feeds.add(_insight("b", "the mill grinds again", topic="mill"))
    got = feeds.feed(["reader"], lambda agent: lambda topic: topic == "mill")
    assert [(a, [i.id for i in ins]) for a, ins in got] == [("reader", ["b"])]


def test_deliveries_grow_with_subscribers_not_with_subscribers_times_shares() -> None:
    feeds = Feeds(FeedConfig(size=2))
    agents = [f"a{n}" for n in range(50)]
    for n in range(200):  # every agent shares four
        feeds.add(_insight(f"i{n}", f"fact {n} of the town", source=agents[n % 50]))
    sent = sum(len(v) for v in _fed(feeds, agents).values())
    assert sent == 50 * 2  # a broadcast: 50 x 199 ... about 9,800


def test_a_followed_source_ranks_first() -> None:
    feeds = Feeds(_only(social=1.0, recency=0.1))
    feeds.add(_insight("friend", "a quiet word", source="friend"))
    for n in range(5):
        feeds.add(_insight(f"x{n}", f"loud news {n}", source="stranger"))
    feeds.follow("reader", ["friend"])
    assert _fed(feeds, ["reader"])["reader"][0] == "friend"


def test_whom_the_agent_talks_to_counts_as_followed() -> None:
    feeds = Feeds(_only(social=1.0))
    feeds.add(_insight("b", "news from bram", source="bram"))
    feeds.add(_insight("c", "news from cleo", source="cleo"))
    feeds.interest("reader", [], talks_to=["cleo"])
    assert _fed(feeds, ["reader"])["reader"][0] == "c"


def test_relevance_to_the_agents_recent_terms_ranks_first() -> None:
    feeds = Feeds(_only(relevance=1.0))
    feeds.add(_insight("h", "the harbour pier flooded overnight"))
    feeds.add(_insight("m", "the mill wheel broke at noon"))
    feeds.interest("reader", ["mill", "wheel"], talks_to=[])
    assert _fed(feeds, ["reader"])["reader"][0] == "m"


def test_an_insight_shared_more_often_ranks_first() -> None:
    feeds = Feeds(_only(popularity=1.0))
    feeds.add(_insight("once", "said once"))
    feeds.add(_insight("often", "said often"))
    for _ in range(3):
        feeds.shared_again("often")
    assert _fed(feeds, ["reader"])["reader"][0] == "often"


def test_newer_insights_rank_first_and_old_ones_expire() -> None:
    feeds = Feeds(FeedConfig(size=1, window=2, relevance=0, social=0, popularity=0))
    feeds.add(_insight("old", "old news"))
    _fed(feeds, [])  # tick 1
    feeds.add(_insight("new", "new news"))
    assert _fed(feeds, ["reader"])["reader"] == ["new"]
    _fed(feeds, [])
    _fed(feeds, [])
    assert _fed(feeds, ["late"]) == {}  # both out of the window
    assert len(feeds) == 0


def test_a_tick_ranks_the_same_whatever_order_its_insights_came_in() -> None:
    texts = [
        (f"i{n}", f"the {thing} is at the mill", f"s{n}") for n, thing in enumerate("abcdefghij")
    ]
    fed = []
    for order in (texts, texts[::-1]):
        feeds = Feeds(FeedConfig(size=3))
        for key, text, source in order:
            feeds.add(_insight(key, text, source=source))
        fed.append(_fed(feeds, ["reader"]))
    assert fed[0] == fed[1]


def test_forgetting_a_source_drops_its_candidates() -> None:
    feeds = Feeds(FeedConfig())
    feeds.add(_insight("x", "from x", source="x"))
    feeds.add(_insight("y", "from y", source="y"))
    feeds.forget("x")
    assert _fed(feeds, ["reader"])["reader"] == ["y"]


def test_partitions_are_stable_and_named() -> None:
    assert pool_addresses(1) == ["pool/main"]
    assert pool_addresses(3) == ["pool/main", "pool/main-1", "pool/main-2"]
    assert [partition_of(a) for a in pool_addresses(3)] == [0, 1, 2]
    assert pool_address("anyone", 1) == "pool/main"
    spread = {pool_address(f"agent{n}", 4) for n in range(100)}
    assert spread == set(pool_addresses(4))
    assert pool_address("agent7", 4) == pool_address("agent7", 4)
    with pytest.raises(ValueError, match="no partition"):
        partition_of("pool/other")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[pool]\ndelivery = 'radio'\n", r"pool\.delivery"),
        ("[pool]\npartitions = 0\n", "partitions must be >= 1"),
        ("[pool.feed]\nsize = 0\n", "size must be >= 1"),
        ("[pool.feed]\nhalf_life = 0\n", "half_life must be > 0"),
        ("[pool.feed]\nsocial = -1\n", "social must be >= 0"),
        ("[pool.feed]\nfanout = 3\n", "fanout"),
    ],
)
def test_a_bad_feed_config_is_refused_by_name(text: str, match: str) -> None:
    import tomllib

    with pytest.raises(ConfigError, match=match):
        decode_config(tomllib.loads(text), AppConfig, source="t.toml")


def _feed_config(partitions: int, delivery: str = "feed") -> AppConfig:
    pool = PoolConfig(
        delivery=delivery,  # type: ignore[arg-type]
        partitions=partitions,
        feed=FeedConfig(size=2, interval=0.0),
    )
    return AppConfig(pool=pool)


WHAT = ("lantern", "key", "map", "ledger", "flag", "rope")


def _agents_on_every_partition(partitions: int) -> list[str]:
    found: dict[str, str] = {}
    n = 0
    while len(found) < partitions:
        found.setdefault(pool_address(f"agent{n}", partitions), f"agent{n}")
        n += 1
    return list(found.values())


async def test_feeds_reach_agents_on_every_partition(
    make_transport: Callable[[], Transport],
) -> None:
    agents = _agents_on_every_partition(3)
    async with MemoryRuntime(_feed_config(3), transport=make_transport()) as rt:
        for agent in agents:
            await rt.memory(agent).subscribe()
        for what, agent in zip(WHAT, agents, strict=False):
            await rt.memory(agent).share(f"the {what} is at the mill", "mill")
        # Nothing goes out before a tick.
        for agent in agents:
            assert await rt.memory(agent).held_insights() == []
        assert await rt.tick_feeds() == 3 * 2
        for agent in agents:
            held = await rt.memory(agent).held_insights()
            assert len(held) == 2
            assert all(i.source != agent for i in held)
        assert await rt.tick_feeds() == 0  # each has had both of the others'
        stats = await rt.pool_stats()
        assert stats.shared == 3
        assert stats.insights == 3  # every partition holds a copy of each
        assert stats.delivered == 6
        assert stats.agents == 3


async def test_a_broadcast_over_partitions_reaches_every_subscriber(
    make_transport: Callable[[], Transport],
) -> None:
    agents = _agents_on_every_partition(3)
    config = _feed_config(3, delivery="broadcast")
    async with MemoryRuntime(config, transport=make_transport()) as rt:
        for agent in agents:
            await rt.memory(agent).subscribe()
        result = await rt.memory(agents[0]).share("the ferry is late today", "ferry")
        assert result.status == "new"
        for agent in agents[1:]:
            held = await _eventually_held(rt, agent)
            assert [i.text for i in held] == ["the ferry is late today"]
        # A duplicate shared on another partition is known there as one.
        again = await rt.memory(agents[1]).share("the ferry is late today", "ferry")
        assert again.status == "duplicate"


async def _eventually_held(rt: MemoryRuntime, agent: str) -> list[Insight]:
    from tests.support.streams import eventually

    held: list[Insight] = []

    async def arrived() -> bool:
        held[:] = await rt.memory(agent).held_insights()
        return bool(held)

    await eventually(arrived, f"an insight reaches {agent}", limit=20.0)
    return held


async def test_forgetting_shares_erases_them_on_every_partition(
    make_transport: Callable[[], Transport],
) -> None:
    agents = _agents_on_every_partition(2)
    async with MemoryRuntime(_feed_config(2), transport=make_transport()) as rt:
        for agent in agents:
            await rt.memory(agent).subscribe()
        await rt.memory(agents[0]).share("the key is under the mat", "town")
        assert await rt.tick_feeds() == 1
        assert await rt.memory(agents[0]).forget_shares() == 1
        for address in pool_addresses(2):
            from actormem.actors.pool.commands import QueryInsights

            held = await rt.ask(address, QueryInsights(topic="*", k=10))
            assert all(i.erased and not i.text for i in held)


async def test_a_peer_note_from_anyone_but_a_partition_is_refused() -> None:
    async with MemoryRuntime(_feed_config(2)) as rt:
        await rt.memory("victim").share("the vault code is 1234", "town")
        note = PeerShared(insight=_insight("z", "forged news"))
        with pytest.raises(InsightSignatureError, match="another partition"):
            await rt.ask("pool/main", note)
        with pytest.raises(InsightSignatureError, match="another partition"):
            await rt.ask("pool/main", PeerForgot(source="victim"))
        stats = await rt.pool_stats()
        assert stats.insights == 1
        held = await rt.memory("victim").insights()
        assert [i.text for i in held] == ["the vault code is 1234"]


async def test_a_feed_confirmation_carries_the_agents_recent_terms() -> None:
    config = msgspec.structs.replace(
        _feed_config(1),
        pool=msgspec.structs.replace(
            _feed_config(1).pool, feed=FeedConfig(size=1, interval=0.0, recency=0.0)
        ),
    )
    async with MemoryRuntime(config) as rt:
        for agent in ("reader", "a", "b"):
            await rt.memory(agent).subscribe()
        await rt.memory("reader").add(
            {"role": "user", "name": "cleo", "content": "the orchard apples are ripe"}
        )
        await rt.memory("a").share("harbour boats are back", "town")
        await rt.memory("b").share("orchard apples sell well", "town")
        await rt.tick_feeds()  # the first feed: nothing known of the reader yet
        await rt.memory("a").share("harbour nets were torn", "town")
        await rt.memory("b").share("orchard trees need water", "town")
        await rt.tick_feeds()  # ranked by what its confirmation said
        held = await rt.memory("reader").held_insights()
        assert "orchard trees need water" in [i.text for i in held]


async def test_subscribe_refuses_a_follows_that_is_not_names() -> None:
    async with MemoryRuntime(_feed_config(1)) as rt:
        with pytest.raises(MemoryInputError, match="follows must be a string"):
            await rt.memory("x").subscribe(follows=[3])  # type: ignore[list-item]
        with pytest.raises(MemoryInputError, match="not one string"):
            await rt.memory("x").subscribe(follows="bram")
        assert (await rt.pool_stats()).agents == 0  # nothing subscribed


async def test_partitions_and_their_feeds_survive_a_restart_over_redis(
    make_redis_transport: Callable[[], RedisTransport],
) -> None:
    agents = _agents_on_every_partition(2)
    config = _feed_config(2)
    async with MemoryRuntime(config, transport=make_redis_transport()) as rt:
        for agent in agents:
            await rt.memory(agent).subscribe()
        await rt.memory(agents[0]).share("the lantern is at the mill", "mill")
        assert await rt.tick_feeds() == 1  # to agents[1], on the other partition
    async with MemoryRuntime(config, transport=make_redis_transport()) as rt:
        after = await rt.pool_stats()
        # The copy, the subscription and the fed delivery were stored with each
        # partition's commands (Copied, Fed): restored, nothing goes out again.
        assert (after.insights, after.agents, after.delivered) == (1, 2, 0)
        await rt.memory(agents[1]).share("the key is at the bridge", "bridge")
        assert await rt.tick_feeds() == 1  # to agents[0]; agents[1] had the lantern
        held = await rt.memory(agents[1]).held_insights()
        assert [i.text for i in held] == ["the lantern is at the mill"]
