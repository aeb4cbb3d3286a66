"""Episodes, core memory and working memory."""

from __future__ import annotations

import msgspec
import pytest

from actormem.actors.conversation import group_units
from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import Message, ToolCall
from actormem.actors.recall.episodes import CORE_TAG, EpisodeConfig, EpisodeState, EpisodicMemory
from actormem.runtime.tokens import get_counter


def user(text: str, importance: float | None = None, **meta: object) -> Message:
    return Message(role="user", content=text, importance=importance, metadata=dict(meta))


def test_episodes_start_recall_and_summarize() -> None:
    mem = EpisodicMemory()
    assert mem.start_episode({"task": "harvest"}) is None  # empty: only takes the metadata
    mem.add([user("We picked twelve baskets of apples."), user("The cider press broke.")])
    first = mem.start_episode({"task": "market"})
    assert first is not None and first.number == 1 and first.metadata == {"task": "harvest"}
    assert first.ended is not None and len(first.messages) == 2
    mem.add(user("Sold forty loaves of bread at the market.", importance=0.9))
    mem.add(user("A stranger asked about the old mill."))
    mem.add(user("Closed the stall at dusk."))
    assert mem.current.number == 2
    assert mem.recall_episode("cider press") == first
    recalled = mem.recall_episode("loaves of bread")
    assert recalled is not None and recalled.number == 2
    assert mem.recall_episode("market") is not None  # metadata is searched too
    assert mem.recall_episode("submarine") is None
    summaries = mem.summarize_episodes()
    assert len(summaries) == 2
    assert summaries[0].startswith('Episode 1 {"task":"harvest"}: 2 messages')
    assert '"We picked twelve baskets of apples."' in summaries[0]
    assert 'Key: "Sold forty loaves' not in summaries[1]  # it is the first message
    assert "Ended:" in summaries[1]


def test_a_custom_summarizer_is_used() -> None:
    mem = EpisodicMemory(summarizer=lambda msgs: f"{len(msgs)} things happened")
    mem.add(user("a"))
    assert mem.summarize_episodes() == ["1 things happened"]


def test_bad_episode_input_is_rejected() -> None:
    mem = EpisodicMemory()
    with pytest.raises(MemoryInputError, match="metadata must be a dict"):
        mem.start_episode(["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(MemoryInputError, match="JSON-able"):
        mem.start_episode({"when": object()})
    with pytest.raises(MemoryInputError, match="expected a Message"):
        mem.add(["text"])  # type: ignore[list-item]
    with pytest.raises(MemoryInputError, match="k must be"):
        mem.recall_episodes("x", 0)


def test_core_memory_holds_important_messages_and_renders_within_budget() -> None:
    counter = get_counter()
    mem = EpisodicMemory(EpisodeConfig(core_threshold=0.7, core_limit=2))
    mem.add(user("trivial chatter", importance=0.1))
    mem.add(user("The vault code is 9921.", importance=0.95))
    mem.add(user("Mara is the new harbour master.", important=True))
    mem.add(user("Bridge tolls doubled.", importance=0.8))
    core = [m.text() for m in mem.core()]
    assert core == ["The vault code is 9921.", "Mara is the new harbour master."]
    block = mem.render_core_block(counter)
    assert block is not None and block.startswith(f"<{CORE_TAG}>")
    assert "9921" in block and "trivial" not in block
    small = mem.render_core_block(counter, budget_tokens=60)
    assert small is not None and counter.count_text(small) <= 60
    assert EpisodicMemory().render_core_block(counter) is None


def test_working_memory_rolls_oldest_into_episodic_keeping_tool_units_whole() -> None:
    mem = EpisodicMemory(EpisodeConfig(working_limit=6, roll_count=3))
    rolled: list[Message] = []
    rolled += mem.add([user("m0"), user("m1")])
    call = ToolCall(id="c1", name="look", arguments="{}")
    rolled += mem.add(
        [
            Message(role="assistant", content=None, tool_calls=(call,)),
            Message(role="tool", content="seen", tool_call_id="c1"),
        ]
    )
    rolled += mem.add([user("m4"), user("m5")])
    assert rolled == []
    rolled += mem.add(user("m6"))
    # m0, m1 and then the whole assistant+tool unit (3 would split it): 4 messages.
    assert [m.role for m in rolled] == ["user", "user", "assistant", "tool"]
    assert [m.text() for m in mem.working()] == ["m4", "m5", "m6"]
    assert mem.episodic_count == 4
    assert all(u.complete for u in group_units(mem.working()))
    assert len(mem.current.messages) == 7  # the episode keeps everything


def test_state_round_trips_through_json() -> None:
    mem = EpisodicMemory(EpisodeConfig(working_limit=2, roll_count=1))
    mem.add([user("a", importance=0.9), user("b")])
    mem.start_episode({"n": 2})
    mem.add([user("c"), user("d")])
    raw = msgspec.json.encode(mem.export_state())
    again = EpisodicMemory(EpisodeConfig(working_limit=2, roll_count=1))
    again.load_state(msgspec.json.decode(raw, type=EpisodeState))
    assert again.episodes() == mem.episodes()
    assert again.working() == mem.working()
    assert again.core() == mem.core()
    assert again.episodic_count == mem.episodic_count
    again.clear()
    assert again.episodes() == [] and again.working() == [] and again.core() == []


def test_config_checks_its_values() -> None:
    with pytest.raises(ValueError, match="roll_count"):
        EpisodeConfig(working_limit=5, roll_count=6)
    with pytest.raises(ValueError, match="core_threshold"):
        EpisodeConfig(core_threshold=1.5)


def test_an_assistant_waiting_for_tool_results_is_not_rolled_away() -> None:
    mem = EpisodicMemory(EpisodeConfig(working_limit=3, roll_count=3))
    call = ToolCall(id="c9", name="look", arguments="{}")
    mem.add([user("m0"), Message(role="assistant", content=None, tool_calls=(call,))])
    rolled = mem.add([user("m2"), user("m3")])
    assert [m.text() for m in rolled] == ["m0"]  # the pending call and all after it stay
    mem.add(Message(role="tool", content="seen", tool_call_id="c9"))
    assert all(u.complete for u in group_units(mem.working()))
