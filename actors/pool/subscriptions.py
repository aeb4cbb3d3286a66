"""Who receives which topic: the insight pool's subscription table.

Kept apart from the pool actor because it is plain bookkeeping with its own
rules: an agent subscribes to named topics and/or to every topic (``*``);
unsubscribing a named topic while subscribed to ``*`` excludes it; ``*`` in an
unsubscribe drops everything. Lookups by topic go through an index, so finding
a topic's recipients costs the number of wildcard and topic subscribers, not
the number of agents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from actormem.actors.pool.commands import WILDCARD, SubscriptionState
from actormem.actors.pool.insights import InsightError
from actormem.actors.pool.sanitize import clean_label
from actormem.actors.pool.topics import MAX_ID_CHARS

__all__ = ("MAX_FOLLOWS", "Subscriptions", "followed_agents", "topic_names")

#: Agents one subscription may follow.
MAX_FOLLOWS: Final = 1_000


class _Subscriber:
    __slots__ = ("all_topics", "excluded", "topics")

    def __init__(self) -> None:
        self.all_topics = False
        self.topics: dict[str, None] = {}
        self.excluded: dict[str, None] = {}


class Subscriptions:
    """Agents' topic subscriptions. Topics given here are already cleaned."""

    def __init__(self) -> None:
        self._agents: dict[str, _Subscriber] = {}
        self._by_topic: dict[str, dict[str, None]] = {}
        self._wildcard: dict[str, None] = {}

    def __len__(self) -> int:
        """Agents known (ever subscribed, even to nothing)."""
        return len(self._agents)

    def agents(self) -> list[str]:
        """Every known agent, in the order they first subscribed."""
        return list(self._agents)

    def subscribe(self, agent: str, topics: Iterable[str]) -> SubscriptionState:
        """Add ``topics`` (``*`` = all) to ``agent``'s; with none, the agent only becomes known."""
        sub = self._agents.get(agent)
        if sub is None:
            sub = self._agents[agent] = _Subscriber()
        for t in topics:
            if t == WILDCARD:
                sub.all_topics = True
                sub.excluded.clear()
                self._wildcard[agent] = None
            else:
                sub.topics[t] = None
                sub.excluded.pop(t, None)
                self._by_topic.setdefault(t, {})[agent] = None
        return self._state(agent, sub)

    def unsubscribe(self, agent: str, topics: Iterable[str]) -> SubscriptionState:
        """Remove ``topics`` from ``agent``'s subscriptions (``*`` = all of them)."""
        sub = self._agents.get(agent)
        if sub is None:
            return SubscriptionState(agent=agent, all_topics=False, topics=(), excluded=())
        for t in topics:
            if t == WILDCARD:
                for name in sub.topics:
                    self._drop(name, agent)
                sub.topics.clear()
                sub.excluded.clear()
                sub.all_topics = False
                self._wildcard.pop(agent, None)
            else:
                if t in sub.topics:
                    del sub.topics[t]
                    self._drop(t, agent)
                if sub.all_topics:
                    sub.excluded[t] = None
        return self._state(agent, sub)

    def remove(self, agent: str) -> None:
        """Forget ``agent`` and every subscription it has."""
        self.unsubscribe(agent, [WILDCARD])
        self._agents.pop(agent, None)

    def recipients(self, topic: str, exclude: str | None = None) -> list[str]:
        """Return the agents subscribed to ``topic`` (wildcard ones first), but ``exclude``."""
        agents = [a for a in self._wildcard if topic not in self._agents[a].excluded]
        seen = set(agents)
        agents.extend(a for a in self._by_topic.get(topic, ()) if a not in seen)
        return [a for a in agents if a != exclude]

    def accepts(self, agent: str) -> Callable[[str], bool] | None:
        """Whether ``agent`` receives a topic, as a test of the topic; None when it
        receives every topic."""
        sub = self._agents.get(agent)
        if sub is None:
            return lambda topic: False
        if sub.all_topics:
            if not sub.excluded:
                return None
            excluded = sub.excluded
            return lambda topic: topic not in excluded
        topics = sub.topics
        return lambda topic: topic in topics

    def subscribed(self) -> list[str]:
        """The agents subscribed to some topic, in the order they first subscribed."""
        return [a for a, s in self._agents.items() if s.all_topics or s.topics]

    def export(self) -> list[SubscriptionState]:
        """Return every agent's subscriptions."""
        return [self._state(a, s) for a, s in self._agents.items()]

    def load(self, states: Iterable[SubscriptionState]) -> None:
        """Replace the table with ``states``."""
        self._agents.clear()
        self._by_topic.clear()
        self._wildcard.clear()
        for state in states:
            sub = self._agents[state.agent] = _Subscriber()
            sub.all_topics = state.all_topics
            sub.topics = dict.fromkeys(state.topics)
            sub.excluded = dict.fromkeys(state.excluded)
            if state.all_topics:
                self._wildcard[state.agent] = None
            for t in state.topics:
                self._by_topic.setdefault(t, {})[state.agent] = None

    def _drop(self, topic: str, agent: str) -> None:
        members = self._by_topic.get(topic)
        if members is not None:
            members.pop(agent, None)
            if not members:
                del self._by_topic[topic]

    @staticmethod
    def _state(agent: str, sub: _Subscriber) -> SubscriptionState:
        return SubscriptionState(
            agent=agent,
            all_topics=sub.all_topics,
            topics=tuple(sub.topics),
            excluded=tuple(sub.excluded),
        )


def topic_names(topics: tuple[str, ...] | str) -> list[str]:
    """The topics a subscribe or an unsubscribe names, cleaned (``*`` stays as it is).

    Raises:
        InsightError: one string instead of a list, or a topic that is no label.
    """
    # msgspec does not check types passed to __init__, so a bare string
    # (``topics="news"``) would otherwise subscribe to n, e, w, s.
    if isinstance(topics, str):
        raise InsightError("topics must be a list of topic names, not one string")
    out = []
    for t in topics:
        out.append(WILDCARD if t == WILDCARD else clean_label(t, "topic").casefold())
    return out


def followed_agents(follows: tuple[str, ...] | str) -> list[str]:
    """The agents a subscription follows, cleaned.

    Raises:
        InsightError: not a list of names, or more than :data:`MAX_FOLLOWS` of them.
    """
    if isinstance(follows, str) or not isinstance(follows, tuple | list):
        raise InsightError("follows must be a list of agent names, not one string")
    if len(follows) > MAX_FOLLOWS:
        raise InsightError(f"follows names {len(follows)} agents; the limit is {MAX_FOLLOWS}")
    return [clean_label(a, "follows", MAX_ID_CHARS) for a in follows]
