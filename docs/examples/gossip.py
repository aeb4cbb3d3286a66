"""A brain of one's own: each agent greets a neighbour and shares what it heard.

docs/simulation.md shows how to run it.
With ``--base-url`` and ``--model`` the agent asks that model what to say.
"""

from __future__ import annotations

from actormem.actors.app.simulation import AgentInfo, Turn


class Gossip:
    """One agent's brain; the run builds one per agent."""

    def __init__(self, agent: AgentInfo) -> None:
        self.agent = agent

    async def step(self, turn: Turn) -> None:
        """The agent's turn: read its context, speak to a neighbour, share the answer."""
        context = await turn.context()
        if turn.llm is not None:
            reply = await turn.llm.complete(context)
            line = reply.choices[0].message.content or "..."
        else:
            line = f"Hello from {turn.agent}, step {turn.step}."
        listener = turn.rng.choice(list(turn.relations))
        heard = await turn.speak(listener, line)
        await turn.share(f"{listener} told {turn.agent}: {heard}", topic="town")

    async def respond(self, turn: Turn, caller: str, said: str) -> str:
        """The answer when another agent speaks to this one."""
        return f"Thanks, {caller}. {self.agent.persona}"
