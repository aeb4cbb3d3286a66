"""What an agent remembers beyond its conversation: insights, long-term memory, episodes.

The agent memory actor owns one :class:`AgentRecall`. It holds the insights the
pool delivered (:class:`InsightInbox`), the long-term memory with its control
mode (:class:`LongTermControl`), episodic and core memory (:class:`EpisodicMemory`)
and applies the agent's retention policy to all of them. ``context()`` asks it for
the delimited blocks that go after the system prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from typing import Any, Final, Protocol

import msgspec

from actormem.actors.messages import Message
from actormem.actors.pool.config import PoolConfig
from actormem.actors.recall.episodes import EpisodeConfig, EpisodicMemory
from actormem.actors.recall.inbox import InsightInbox
from actormem.actors.recall.keyed import KeyedEntries
from actormem.actors.recall.longterm import (
    LongTermConfig,
    LongTermMemory,
    render_memories_block,
)
from actormem.actors.recall.tools import LongTermControl
from actormem.actors.retention import AgentRetention, RetainedPart, RetentionConfig, part_snapshot
from actormem.runtime import TokenCounter

__all__ = ("REPLY_ROLES", "AgentRecall", "RecallConfig")

#: Roles that end a turn: static control records what led to one and the reply.
REPLY_ROLES: Final = frozenset({"assistant", "agent_response"})
#: The share of a context budget reserved for the recall blocks.
BLOCK_SHARE: Final = 0.25
#: Tokens of chat framing around the recall system message (role, separators).
BLOCK_FRAMING: Final = 8


class _CountedPart(RetainedPart, Protocol):
    """A retained part that counts its changes (``changes`` moves on every one)."""

    changes: int


class RecallConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The config sections an :class:`AgentRecall` reads."""

    pool: PoolConfig
    longterm: LongTermConfig
    episodes: EpisodeConfig
    retention: RetentionConfig


class AgentRecall:
    """One agent's insights, long-term memory and episodes, with its retention policy.

    Args:
        agent: the agent's name.
        config: the sections it reads.
        conversation: the memory actor's own state as a retained part (so
            ``single_run`` clears and ``persistent`` saves the conversation too).
    """

    def __init__(
        self,
        agent: str,
        config: RecallConfig,
        conversation: RetainedPart | None = None,
    ) -> None:
        self.agent = agent
        self.inbox = InsightInbox(signer=config.pool.signer())
        self.longterm = LongTermMemory(config.longterm)
        self.control = LongTermControl(self.longterm)
        self.episodes = EpisodicMemory(config.episodes)
        #: Entries under (namespace, key): part of long-term memory, kept and erased with it.
        self.keyed = KeyedEntries(config.longterm)
        self._since_reply: list[Message] = []
        # The last blocks() answer: recomputed only when the question or anything
        # recall holds changed (context() is often asked again with nothing new).
        self._generation = 0
        # Changes other than observe()'s (which replays from the added messages).
        self._edits = 0
        self._cached: tuple[tuple[Any, ...], list[str]] | None = None
        # Recall's own parts: in the memory's durable snapshot, and kept by retention
        # together with the conversation.
        self._parts: dict[str, _CountedPart] = {
            "insights": self.inbox,
            "longterm": self.longterm,
            "episodes": self.episodes,
            "keyed": self.keyed,
        }
        # Each part's encoded state with its change count then: a part that did not
        # change since is not encoded again.
        self._encoded: dict[str, tuple[int, bytes | None]] = {}
        retained: dict[str, RetainedPart] = dict(self._parts)
        if conversation is not None:
            retained["conversation"] = conversation
        policy = config.retention.policy_for(agent)
        store = config.retention.store() if policy == "persistent" else None
        self.retention = AgentRetention(agent, policy, store, retained)

    def observe(self, messages: Sequence[Message]) -> None:
        """Take in messages just added: episodes always; long-term memory after a reply.

        Messages up to and including the newest reply are recorded; those after it
        wait for the next reply. Observing a batch or its messages one at a time
        thus does the same (a reload replays adds one stored message at a time).
        """
        self._generation += 1
        self.episodes.add(messages)
        last = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].role in REPLY_ROLES),
            None,
        )
        if last is None:
            self._since_reply.extend(messages)
            return
        self.control.after_reply([*self._since_reply, *messages[: last + 1]])
        self._since_reply = list(messages[last + 1 :])

    @property
    def awaiting_reply(self) -> list[Message]:
        """Observed messages not yet recorded (no reply after them yet): part of the
        durable state, with :meth:`component_states`."""
        return list(self._since_reply)

    @awaiting_reply.setter
    def awaiting_reply(self, messages: list[Message]) -> None:
        self._since_reply = list(messages)

    @property
    def edits(self) -> int:
        """A counter that moves on every change not replayable from the added messages
        (everything but :meth:`observe`): the memory's durable snapshot compares it.

        A retrieval's touches (``touch_on_retrieve``: when each recalled memory was
        last recalled) do not move it: they go with the next snapshot written for
        another change, so a read stays a read (over Redis it waits for no commit),
        and a restore after a crash may rank the memories recalled since as less
        recent."""
        return self._edits

    def changed(self, logged: bool = False) -> None:
        """Note that something recall holds changed outside :meth:`observe` (a record,
        a tool call, an episode, a load, an insight delivered).

        Args:
            logged: the change is kept as an entry of the memory's durable log (an
                insight delivery, see :mod:`actormem.actors.memory.snapshot`): it
                calls for no new snapshot.
        """
        self._generation += 1
        if not logged:
            self._edits += 1

    async def blocks(
        self,
        query: str,
        budget: int,
        counter: TokenCounter,
        exclude: Container[str] = (),
        exclude_key: Any = None,
    ) -> list[str]:
        """The recall blocks for a context, within ``budget`` tokens, most important first.

        Core memory, then the insights most relevant to ``query``, then (static
        control) the long-term memories recalled for it, each within its own
        configured limit too. Messages whose ids are in ``exclude`` (already in the
        context) are not repeated. ``exclude_key`` names ``exclude`` for the cache
        (None: do not cache).
        """
        key = (query, budget, exclude_key, self._generation)
        if exclude_key is not None and self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        left = budget
        out: list[str] = []
        renderers: list[Callable[[int], Any]] = [
            lambda b: self.episodes.render_core_block(counter, b, exclude),
            lambda b: self.inbox.render(query, b, counter),
        ]
        for render in renderers:
            if left <= 0:
                break
            block = render(left)
            if block:
                out.append(block)
                left -= counter.count_text(block) + 1
        if left > 0 and self.control.mode.static and query.strip():
            recalled = [
                r
                for r in await self.longterm.retrieve(query)
                if not r.entry.source_message_ids
                or not all(i in exclude for i in r.entry.source_message_ids)
            ]
            block = render_memories_block(
                recalled, min(left, self.longterm.config.block_tokens), counter
            )
            if block:
                out.append(block)
        if exclude_key is not None:
            self._cached = (key, out)
        return out

    def component_states(self, without: Container[str] = ()) -> dict[str, bytes]:
        """Every component's state (but the ones named in ``without``), encoded (for
        the durable snapshot); a part is encoded again only when its change count moved."""
        encoded = self._encoded
        states: dict[str, bytes] = {}
        for name, part in self._parts.items():
            if name in without:
                continue
            changes = part.changes
            kept = encoded.get(name)
            if kept is None or kept[0] != changes:
                kept = encoded[name] = (changes, part_snapshot(part))
            if kept[1] is not None:
                states[name] = kept[1]
        return states

    def load_component_states(self, states: dict[str, bytes]) -> None:
        """Load what :meth:`component_states` returned."""
        for name, data in states.items():
            part = self._parts.get(name)
            if part is not None:
                part.durable_restore(data, [])
        self._generation += 1
        self._edits += 1

    def clear(self) -> None:
        """Forget everything held here (not the conversation)."""
        for part in self._parts.values():
            part.clear()
        self._since_reply = []
        self._generation += 1
        self._edits += 1

    @staticmethod
    def latest_query(messages: Iterable[Message]) -> str:
        """The text to rank recall by: the newest user or agent_call message."""
        for m in reversed(list(messages)):
            if m.role in ("user", "agent_call"):
                return m.text()
        return ""
