"""The scripted brain: a seeded, offline stand-in for an LLM.

Each step the agent reads its ``context()`` as an LLM agent would, sometimes
calls a (pretend) tool, shares its planted facts once they have been told and
later passes on what it heard, then says a line to one of its relations: small
talk about the scenario's topics and places or, as often as the scenario's
``[talk] tell_news`` says, a piece of news its memory holds. Every choice comes
from the turn's RNG, drawn the same way whatever the memory holds, so the same
seed tells the same story however the turns of a step overlap.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

from actormem.actors.app.simulation.brains.protocol import AgentInfo, Turn
from actormem.actors.app.simulation.scenario import Talk
from actormem.actors.config import SimulationConfig
from actormem.actors.messages import Message, ToolCall

__all__ = ("ScriptedBrain",)

_MOODS = ("worried", "cheerful", "curious", "tired", "hopeful")

T = TypeVar("T")


def _pick(items: Sequence[T], u: float) -> T:
    """The item a draw ``u`` (0 <= u < 1) picks. What the memory holds depends on how
    fast news travelled; drawing ``u`` before looking keeps the RNG's stream, and so
    the rest of the story, the same however many items there turn out to be."""
    return items[min(int(u * len(items)), len(items) - 1)]


class ScriptedBrain:
    """The built-in brain of ``kind = "scripted"``.

    Args:
        agent: who the agent is (its persona and planted facts are used).
        simulation: the simulation config (its tool-call, sharing and gossip settings).
        talk: what it talks about (the scenario's ``[talk]``; the town's by default).
    """

    def __init__(
        self, agent: AgentInfo, simulation: SimulationConfig, talk: Talk | None = None
    ) -> None:
        self.agent = agent
        self.config = simulation
        self.talk = talk or Talk()

    async def step(self, turn: Turn) -> None:
        """Read the context, maybe call a tool, share or gossip, then talk to someone."""
        cfg = self.config
        rng = turn.rng
        # What an LLM agent reads first; no flush, so that the narrator's fact is
        # stored with this step's lines, in one add.
        await turn.memory.context(turn.context_tokens)
        if rng.random() < cfg.tool_call_rate:
            turn.remember(*self._tool_call(turn))
        if turn.step == cfg.fact_steps:  # the facts are told: now the agents share some
            told = [f for f in self.agent.facts if f.step is None or f.step <= turn.step]
            for fact in told[: cfg.share_facts]:
                await turn.share(fact.statement, fact.topic, 0.8)
        elif turn.step > cfg.fact_steps and rng.random() < cfg.gossip_rate:
            pick, reword = rng.random(), rng.random()
            heard = await turn.memory.held_insights(k=50)
            if heard:
                rumour = _pick(heard, pick)
                # Passed on as heard, or in other words: the pool drops both as
                # duplicates (exact, near).
                text = rumour.text
                if reword < 0.5:
                    text = text.replace("Remember this:", "Word around town is that")
                await turn.share(text, rumour.topic, 0.5)
        talk = self.talk
        partner = rng.choice(turn.relations) if turn.relations else turn.agent
        topic = rng.choice(talk.topics)
        place = rng.choice(talk.places)
        mood = rng.choice(_MOODS)
        line = (
            f"Step {turn.step}: as the {self.agent.persona}, I am {mood} about {topic}; "
            f"I saw it near the {place}."
        )
        # No draw at all without news to tell, so the town's story stays the same.
        if talk.tell_news and rng.random() < talk.tell_news:
            pick = rng.random()
            news = await turn.memory.search(talk.news_marker)
            held = list(dict.fromkeys(m.text() for m in news))
            if held:
                line = _pick(held, pick)
        await turn.speak(partner, line)

    async def respond(self, turn: Turn, caller: str, said: str) -> str:
        """A friendly word back about some topic of the scenario."""
        return f"Thanks, {caller}. I heard something about {turn.rng.choice(self.talk.topics)} too."

    def _tool_call(self, turn: Turn) -> tuple[Message, Message]:
        tool = turn.rng.choice(self.talk.tools)
        place = turn.rng.choice(self.talk.places)
        call = ToolCall(
            id=f"call-{turn.agent}-{turn.step}",
            name=tool,
            arguments=json.dumps({"place": place, "step": turn.step}),
        )
        value = turn.rng.randrange(1, 500)
        result = json.dumps({"place": place, "value": value, "ok": True})
        return (
            Message(role="assistant", tool_calls=(call,)),
            Message(role="tool", tool_call_id=call.id, name=call.name, content=result),
        )
