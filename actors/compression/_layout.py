"""Where things are in a working view: what is protected, what may be compressed.

Compression never touches a *protected* message: system messages, messages
marked ``metadata.pinned``, the calls and results of ``pinned_tools``, the latest
user message, and every message of a *waiting* tool unit: a call still waiting
for its result while it is in the current round or among the last ``last_keep``
messages (compressing it would orphan the result when it arrives).

Everything else may be compressed, tool units that cannot reach an LLM included:
a call left unanswered past the current round and the last ``last_keep`` messages
is *abandoned*, and a tool result whose call is not before it in the view (or a
second result for one call) is an *orphan*; neither blocks the messages around it.

A span that a strategy replaces as a whole (tool runs, rounds, the current round)
is *closed*: it holds no protected message, and every tool result in it has its
call in it too. A call's results that landed after the span (late results, rounds
later perhaps) are *pulled* into the span's replacement: summarized with it and
taken out of their places, so that a call and its result never come apart.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from actormem.actors.compression._slices import TimeSlicer
from actormem.actors.compression.config import CompressionConfig
from actormem.actors.conversation import group_units, leading_system_count
from actormem.actors.messages import Message

__all__ = ("USER_ROLES", "Layout", "sendable", "sent_and_set_aside", "set_aside", "unit_indices")

#: Roles that start a round (an agent_call is a request, as a user message is).
USER_ROLES = frozenset({"user", "agent_call"})
_ASSISTANT_ROLES = frozenset({"assistant", "agent_response"})


def sendable(view: Sequence[Message]) -> list[Message]:
    """The messages of ``view`` that can reach an LLM, in the order they are sent.

    Complete units only, each call followed by its results: a call still waiting
    and an orphan result are set aside (as ``context()`` sets them aside).
    """
    return sent_and_set_aside(view)[0]


def set_aside(view: Sequence[Message]) -> list[str]:
    """What of ``view`` cannot reach an LLM: its calls without results and orphan results,
    one line each, naming the call ids (no indices, so views can be compared)."""
    return sent_and_set_aside(view)[1]


def sent_and_set_aside(view: Sequence[Message]) -> tuple[list[Message], list[str]]:
    """:func:`sendable` and :func:`set_aside` of ``view`` at once."""
    sent: list[Message] = []
    aside: list[str] = []
    for unit in group_units(view):
        if unit.complete:
            sent.extend(unit.messages)
            continue
        head = unit.messages[0]
        if head.tool_calls:
            aside.append(f"calls without results: {sorted(c.id for c in head.tool_calls)}")
        else:
            aside.append(f"orphan tool result {head.tool_call_id!r}")
    return sent, aside


def unit_indices(view: Sequence[Message]) -> list[tuple[list[int], bool]]:
    """The view's units (:func:`actormem.actors.conversation.group_units`) as the
    indices of their messages, head first, and whether they are complete."""
    at: dict[int, list[int]] = {}  # a result's object -> its indices, last first
    for index in range(len(view) - 1, -1, -1):
        if view[index].role == "tool":
            at.setdefault(id(view[index]), []).append(index)
    out: list[tuple[list[int], bool]] = []
    for unit in group_units(view):
        indices = [unit.start]
        for m in unit.messages[1:]:
            # A result comes after its call; the same object twice in a view is
            # placed by the earliest index after the call.
            spots = at[id(m)]
            while spots[-1] < unit.start:
                spots.pop()
            indices.append(spots.pop())
        out.append((indices, unit.complete))
    return out


class Layout:
    """The structure of one view, computed once per strategy pass.

    Attributes:
        view: the messages.
        protected: indices of messages no strategy may change.
        first: index of the first message after the leading system messages.
        latest_user: index of the latest user (or agent_call) message, or None.
        latest_assistant: index of the latest assistant message, or None.
        current_start: where the current round starts (the latest user message,
            or ``first`` when there is none).
    """

    __slots__ = (
        "_heads",
        "_hi",
        "_lo",
        "_members",
        "current_start",
        "first",
        "latest_assistant",
        "latest_user",
        "protected",
        "view",
    )

    def __init__(
        self,
        view: Sequence[Message],
        config: CompressionConfig,
        units: list[tuple[list[int], bool]] | None = None,
    ) -> None:
        self.view = view
        self.first = leading_system_count(view)
        self.latest_user = _last_index(view, USER_ROLES)
        self.latest_assistant = _last_index(view, _ASSISTANT_ROLES)
        self.current_start = self.latest_user if self.latest_user is not None else self.first
        waiting_from = min(self.current_start, len(view) - config.last_keep)
        pinned_tools = frozenset(config.pinned_tools)
        protected: set[int] = {i for i, m in enumerate(view) if m.role == "system" or m.pinned}
        if self.latest_user is not None:
            protected.add(self.latest_user)
        # Each message's unit spans [_lo[i], _hi[i]) of the view.
        self._lo = list(range(len(view)))
        self._hi = [i + 1 for i in range(len(view))]
        # A unit's head (its call) mapped to the indices of its other messages.
        self._members: dict[int, list[int]] = {}
        for indices, complete in unit_indices(view) if units is None else units:
            if complete and len(indices) == 1:
                continue  # a message without calls: nothing to pair or protect here
            lo, hi = min(indices), max(indices) + 1
            if len(indices) > 1:
                self._members[indices[0]] = indices[1:]
            for i in indices:
                self._lo[i], self._hi[i] = lo, hi
            head = view[indices[0]]
            waiting = not complete and bool(head.tool_calls) and indices[0] >= waiting_from
            uses_pinned_tool = any(call.name in pinned_tools for call in head.tool_calls) or any(
                view[i].role == "tool" and view[i].name in pinned_tools for i in indices
            )
            # A pinned result keeps its call too (replacing the call takes the result).
            if waiting or uses_pinned_tool or not protected.isdisjoint(indices):
                protected.update(indices)
        self.protected = frozenset(protected)
        self._heads = sorted(self._members)

    @classmethod
    async def build(
        cls, view: Sequence[Message], config: CompressionConfig, slicer: TimeSlicer
    ) -> Layout:
        """The layout of ``view``, letting other tasks run before and between its two halves."""
        await slicer.before_view_pass(len(view))
        units = unit_indices(view)
        await slicer.before_view_pass(len(view))
        return cls(view, config, units)

    def _free(self, lo: int, hi: int) -> list[bool]:
        """For each index of ``[lo, hi)``: may it be part of a closed span within it?"""
        protected = self.protected
        bad = _Counts([i in protected or self._lo[i] < lo for i in range(lo, hi)])
        # A unit cannot be replaced with a gap in it: a call whose unit, within
        # [lo, hi), straddles a bad index is bad with all its results, which may
        # make further units bad. Sweeps in both directions settle chains of
        # overlapping units (each call answered after the next one) in a few passes.
        heads = self._heads[bisect_left(self._heads, lo) : bisect_left(self._heads, hi)]
        units = [
            (
                head - lo,
                min(self._hi[head], hi) - lo,
                [head - lo, *(m - lo for m in self._members[head] if m < hi)],
            )
            for head in heads
        ]
        changed = True
        while changed:
            changed = False
            for order in (units, reversed(units)):
                for start, end, indices in order:
                    if not bad.flags[start] and bad.any(start, end):
                        for k in indices:
                            bad.mark(k)
                        changed = True
        return [not b for b in bad.flags]

    def segments(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Maximal closed spans within ``[lo, hi)``."""
        out: list[tuple[int, int]] = []
        start: int | None = None
        for k, free in enumerate(self._free(lo, hi)):
            if free and start is None:
                start = lo + k
            elif not free and start is not None:
                out.append((start, lo + k))
                start = None
        if start is not None:
            out.append((start, hi))
        return out

    def pulled(self, lo: int, hi: int) -> list[int]:
        """Indices at or after ``hi`` of the results of calls made in ``[lo, hi)``:
        a replacement of that span takes them along."""
        return sorted(i for head in range(lo, hi) for i in self._members.get(head, ()) if i >= hi)

    def take(self, lo: int, hi: int) -> tuple[list[int], list[Message]]:
        """What replacing the closed span ``[lo, hi)`` takes: the pulled indices, and
        the messages replaced (the span's, then the pulled ones)."""
        pulled = self.pulled(lo, hi)
        return pulled, [*self.view[lo:hi], *(self.view[i] for i in pulled)]

    def unit_cost(self, index: int) -> tuple[int, int]:
        """Messages and tokens that taking ``index`` into a span adds: its whole unit
        for a call, nothing for a result (its call counts it), else the message."""
        if self._lo[index] < index:
            return 0, 0
        unit = [index, *self._members.get(index, ())]
        return len(unit), sum(self.view[i].tokens for i in unit)

    def tool_runs(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Closed spans within ``[lo, hi)`` made only of tool calls and tool results."""
        runs: list[tuple[int, int]] = []
        for seg_lo, seg_hi in self.segments(lo, hi):
            start: int | None = None
            for i in range(seg_lo, seg_hi + 1):
                toolish = i < seg_hi and (
                    self.view[i].role == "tool" or bool(self.view[i].tool_calls)
                )
                if toolish and start is None:
                    start = i
                elif not toolish and start is not None:
                    runs.extend(self.segments(start, i))
                    start = None
        return runs

    def rounds(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Split ``[lo, hi)`` at user messages: each range is one round."""
        starts = [lo] + [i for i in range(lo + 1, hi) if self.view[i].role in USER_ROLES]
        return [(s, e) for s, e in zip(starts, [*starts[1:], hi], strict=True) if s < e]


class _Counts:
    """Flags over positions, with how many are set in any range (a Fenwick tree)."""

    __slots__ = ("_tree", "flags")

    def __init__(self, flags: list[bool]) -> None:
        self.flags = flags
        self._tree = [0] * (len(flags) + 1)
        for k, flag in enumerate(flags):
            if flag:
                self._add(k)

    def _add(self, k: int) -> None:
        k += 1
        while k < len(self._tree):
            self._tree[k] += 1
            k += k & -k

    def _before(self, k: int) -> int:
        total = 0
        while k > 0:
            total += self._tree[k]
            k -= k & -k
        return total

    def mark(self, k: int) -> None:
        """Set the flag at ``k``."""
        if not self.flags[k]:
            self.flags[k] = True
            self._add(k)

    def any(self, start: int, end: int) -> bool:
        """True if a flag is set in ``[start, end)``."""
        return self._before(end) > self._before(start)


def _last_index(view: Sequence[Message], roles: frozenset[str]) -> int | None:
    for i in range(len(view) - 1, -1, -1):
        if view[i].role in roles:
            return i
    return None
