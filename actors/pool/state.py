"""What the pool stores, and how the journal's entries are applied to it again.

:class:`PoolState` is the whole state: insights, subscriptions, the shares
applied and the delivery cursors. The shares applied are kept by command id, so
that a repeat of a share gets the answer it got the first time.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Literal, Protocol

import msgspec

from actormem.actors.pool.commands import ShareResult, SubscriptionState
from actormem.actors.pool.cursors import Cursor, Cursors
from actormem.actors.pool.feeds import Feeds
from actormem.actors.pool.insights import Insight
from actormem.actors.pool.journal import Acked, Copied, Fed, Op, Shared, Subscribed, Unsubscribed
from actormem.actors.pool.subscriptions import Subscriptions
from actormem.actors.pool.topics import Topics
from actormem.runtime.state import SnapshotState

__all__ = (
    "STORED_APPLIED",
    "AppliedShare",
    "PoolState",
    "SavedPool",
    "erase_applied",
    "load_applied",
    "remember",
    "replay",
    "stored_applied",
)

#: The applied shares stored with the pool's state: the newest. (A repeat of an
#: older new share is still found by its insight's id while the insight is held,
#: and the transport skips a redelivered envelope by its own id.)
STORED_APPLIED: Final = 1_000


class AppliedShare(msgspec.Struct, frozen=True, kw_only=True):
    """A share the pool applied, by command id, as stored: a repeat of it gets the
    same answer. ``insight`` is None when the answer's insight is the held one of
    the same id (a new share's)."""

    id: str
    status: Literal["new", "duplicate", "near_duplicate"]
    similarity: float = 1.0
    recipients: int = 0
    insight: Insight | None = None


class PoolState(msgspec.Struct, frozen=True, kw_only=True):
    """What the pool stores: its insights, subscriptions, the shares it applied and
    every agent's delivery cursor with the pool-wide delivery number."""

    version: int = 1
    insights: list[Insight] = msgspec.field(default_factory=list)
    subscriptions: list[SubscriptionState] = msgspec.field(default_factory=list)
    applied: list[AppliedShare] = msgspec.field(default_factory=list)
    cursors: list[Cursor] = msgspec.field(default_factory=list)
    delivery_number: int = 0


def remember(
    applied: OrderedDict[str, ShareResult], key: str, result: ShareResult, window: int
) -> None:
    """Note the answer to share ``key``; the oldest goes past ``window`` answers."""
    applied[key] = result
    if len(applied) > window:
        applied.popitem(last=False)


def stored_applied(applied: OrderedDict[str, ShareResult], topics: Topics) -> list[AppliedShare]:
    """The newest :data:`STORED_APPLIED` answers as stored, oldest first.

    A new share's insight is left out while the topics hold it.
    """
    newest = list(itertools.islice(reversed(applied.items()), STORED_APPLIED))
    out = []
    for key, result in reversed(newest):
        held = result.status == "new" and topics.find(key) is not None
        out.append(
            AppliedShare(
                id=key,
                status=result.status,
                similarity=result.similarity,
                recipients=result.recipients,
                insight=None if held else result.insight,
            )
        )
    return out


def load_applied(stored: list[AppliedShare], topics: Topics) -> OrderedDict[str, ShareResult]:
    """The answers ``stored`` holds; one whose insight is no longer held is dropped."""
    applied: OrderedDict[str, ShareResult] = OrderedDict()
    for a in stored:
        insight = a.insight or topics.find(a.id)
        if insight is not None:
            applied[a.id] = ShareResult(
                status=a.status,
                insight=insight,
                similarity=a.similarity,
                recipients=a.recipients,
            )
    return applied


def erase_applied(
    applied: OrderedDict[str, ShareResult],
    source: str,
    fresh: dict[str, Insight],
    topics: Topics,
) -> None:
    """Blank the text of ``source``'s insights in the answers.

    Each insight blanked is added to ``fresh``, by id.
    """
    for key, result in applied.items():
        insight = result.insight
        if insight.source != source or insight.erased:
            continue
        blank = fresh.get(insight.id) or topics.erased(insight)
        fresh[blank.id] = blank  # shared, delivered, and no longer held
        applied[key] = msgspec.structs.replace(result, insight=blank)


def replay(
    op: Op,
    *,
    topics: Topics,
    subs: Subscriptions,
    cursors: Cursors,
    feeds: Feeds | None,
    facts_topic: str,
    remember: Callable[[str, ShareResult], None],
) -> None:
    """Do again to the state what a journaled command did (no delivery is sent)."""
    match op:
        case Shared(id=key, result=result, evicted=evicted, recipients=recipients):
            if result.status == "new" and topics.replay_put(result.insight, evicted):
                for agent in recipients:
                    cursors.next(agent, result.insight)
                if feeds is not None and result.insight.topic != facts_topic:
                    feeds.add(result.insight)
            remember(key, result)
        case Subscribed(agent=agent, topics=named, backfill=backfill):
            subs.subscribe(agent, named)
            for key in backfill:
                insight = topics.find(key)
                if insight is not None:
                    cursors.next(agent, insight)
        case Unsubscribed(agent=agent, topics=named):
            subs.unsubscribe(agent, named)
        case Acked(agent=agent, through=through):
            cursors.acked(agent, through)
        case Copied(insight=insight, evicted=evicted, recipients=recipients):
            if topics.replay_put(insight, evicted):
                for agent in recipients:
                    cursors.next(agent, insight)
                if feeds is not None and insight.topic != facts_topic:
                    feeds.add(insight)
        case Fed(feeds=fed):
            for agent, keys in fed:
                held = [i for i in map(topics.find, keys) if i is not None]
                for n, insight in enumerate(held):
                    cursors.next(agent, insight, last=n == len(held) - 1)
                if feeds is not None:
                    feeds.sent(agent, keys)


class _Pool(Protocol):
    def export_state(self) -> PoolState: ...

    def load_state(self, state: PoolState) -> None: ...


class SavedPool(SnapshotState[PoolState]):
    """The pool's state as the part its session file keeps."""

    __slots__ = ("_pool",)

    state_type = PoolState

    def __init__(self, pool: _Pool) -> None:
        self._pool = pool

    def export_state(self) -> PoolState:
        return self._pool.export_state()

    def load_state(self, state: PoolState) -> None:
        self._pool.load_state(state)
