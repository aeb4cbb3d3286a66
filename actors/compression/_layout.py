"""Where things are in a working view: what is protected, what may be compressed.

Compression never touches a *protected* message: system messages, messages
marked ``metadata.pinned``, the calls and results of ``pinned_tools``, the latest
user message, and every message of an incomplete tool unit (a call still waiting
for its result: compressing it would orphan the result when it arrives). Spans
that a strategy replaces as a whole (tool runs, rounds, the current round) are
made of *compressible units*: complete units, none of them protected, whose
messages sit next to each other in the view, so that replacing the span can
never split a tool call from its result.
"""

from __future__ import annotations

from collections.abc import Sequence

from actormem.actors.compression.config import CompressionConfig
from actormem.actors.conversation import group_units, leading_system_count
from actormem.actors.messages import Message

__all__ = ("USER_ROLES", "Layout")

#: Roles that start a round (an agent_call is a request, as a user message is).
USER_ROLES = frozenset({"user", "agent_call"})
_ASSISTANT_ROLES = frozenset({"assistant", "agent_response"})


class Layout:
    """The structure of one view, computed once per strategy pass.

    Attributes:
        view: the messages.
        units: the view's units (see :func:`actormem.actors.conversation.group_units`).
        protected: indices of messages no strategy may change.
        first: index of the first message after the leading system messages.
        latest_user: index of the latest user (or agent_call) message, or None.
        latest_assistant: index of the latest assistant message, or None.
        current_start: where the current round starts (the latest user message,
            or ``first`` when there is none).
    """

    __slots__ = (
        "_unit_at",
        "current_start",
        "first",
        "latest_assistant",
        "latest_user",
        "protected",
        "units",
        "view",
    )

    def __init__(self, view: Sequence[Message], config: CompressionConfig) -> None:
        self.view = view
        self.first = leading_system_count(view)
        self.latest_user = _last_index(view, USER_ROLES)
        self.latest_assistant = _last_index(view, _ASSISTANT_ROLES)
        self.current_start = self.latest_user if self.latest_user is not None else self.first
        self.units = group_units(view)
        answer_at = _answer_indices(view)
        pinned_tools = frozenset(config.pinned_tools)
        protected: set[int] = {i for i, m in enumerate(view) if m.role == "system" or m.pinned}
        if self.latest_user is not None:
            protected.add(self.latest_user)
        # A compressible unit starts at its index here, mapped to its end (exclusive).
        self._unit_at: dict[int, int] = {}
        blocked: set[int] = set()
        for unit in self.units:
            indices = [unit.start] + [
                answer_at[m.tool_call_id]
                for m in unit.messages[1:]
                if m.tool_call_id is not None and m.tool_call_id in answer_at
            ]
            lo, hi = min(indices), max(indices) + 1
            uses_pinned_tool = any(
                call.name in pinned_tools for call in unit.messages[0].tool_calls
            ) or any(m.role == "tool" and m.name in pinned_tools for m in unit.messages)
            if not unit.complete or uses_pinned_tool:
                protected.update(indices)
                continue
            if hi - lo == len(indices):
                self._unit_at[lo] = hi
            else:
                # Results separated from their call: what lies between them must stay
                # put, or a summary would land inside the pair.
                blocked.update(range(lo, hi))
        self.protected = frozenset(protected)
        # A unit with a protected or blocked message is not compressible.
        untouchable = self.protected | blocked
        for lo in [
            lo for lo, hi in self._unit_at.items() if untouchable.intersection(range(lo, hi))
        ]:
            del self._unit_at[lo]

    def unit_end(self, start: int) -> int | None:
        """End (exclusive) of the compressible unit starting at ``start``, or None."""
        return self._unit_at.get(start)

    def segments(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Maximal ranges within ``[lo, hi)`` made only of compressible units."""
        out: list[tuple[int, int]] = []
        i = lo
        while i < hi:
            end = self._unit_at.get(i)
            if end is None or end > hi:
                i += 1
                continue
            start = i
            while end is not None and end <= hi:
                i = end
                end = self._unit_at.get(i)
            out.append((start, i))
        return out

    def tool_runs(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Ranges within ``[lo, hi)`` of consecutive compressible tool-call units."""
        runs: list[tuple[int, int]] = []
        for seg_lo, seg_hi in self.segments(lo, hi):
            i = seg_lo
            run_start: int | None = None
            while i < seg_hi:
                end = self._unit_at[i]
                is_tool = bool(self.view[i].tool_calls)
                if is_tool and run_start is None:
                    run_start = i
                elif not is_tool and run_start is not None:
                    runs.append((run_start, i))
                    run_start = None
                i = end
            if run_start is not None:
                runs.append((run_start, seg_hi))
        return runs

    def rounds(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Split ``[lo, hi)`` at user messages: each range is one round."""
        starts = [lo] + [i for i in range(lo + 1, hi) if self.view[i].role in USER_ROLES]
        return [(s, e) for s, e in zip(starts, [*starts[1:], hi], strict=True) if s < e]


def _answer_indices(view: Sequence[Message]) -> dict[str, int]:
    """Map each call id to the index of its first result after the call (as group_units does)."""
    called: set[str] = set()
    answer_at: dict[str, int] = {}
    for i, m in enumerate(view):
        for call in m.tool_calls:
            called.add(call.id)
        if m.role == "tool" and m.tool_call_id in called and m.tool_call_id not in answer_at:
            answer_at[m.tool_call_id] = i
    return answer_at


def _last_index(view: Sequence[Message], roles: frozenset[str]) -> int | None:
    for i in range(len(view) - 1, -1, -1):
        if view[i].role in roles:
            return i
    return None
