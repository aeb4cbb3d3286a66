"""The LLM brain: a chat model behind any OpenAI-compatible endpoint drives each agent.

Each step builds the prompt from the agent's ``context()`` (after storing what the
narrator told it) and one instruction naming the step and the other agents, and
offers the model tools: ``talk_to`` (speak to another agent, whose brain answers),
``share_insight`` (share with the insight pool) and, when the agent's long-term
memory is in ``agent_control`` or ``both`` mode, the memory tools
``record_to_memory`` / ``retrieve_from_memory`` (and every other tool the memory
offers, such as ``context_reload``). The reply and every tool result
are stored in the agent's memory; while the model keeps calling tools it is
asked again, up to ``max_tool_rounds`` times. An agent spoken to answers with
one model call on its own context.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from actormem.actors.app.simulation.brains.llm_client import LLMClient
from actormem.actors.app.simulation.brains.protocol import AgentInfo, BrainError, Turn
from actormem.actors.config import BrainConfig
from actormem.actors.messages import Message, ToolCall

__all__ = ("SHARE_TOOL", "TALK_TOOL", "LLMBrain")

TALK_TOOL: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": "talk_to",
        "description": "Say something to another agent; returns what they answer.",
        "parameters": {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "The other agent's name."},
                "message": {"type": "string", "description": "What you say to them."},
            },
            "required": ["agent", "message"],
            "additionalProperties": False,
        },
    },
}

SHARE_TOOL: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": "share_insight",
        "description": "Share something you learned with every agent who follows the topic.",
        "parameters": {
            "type": "object",
            "properties": {
                "insight": {"type": "string", "description": "What you learned, in one line."},
                "topic": {"type": "string", "description": "What it is about (a place, say)."},
            },
            "required": ["insight"],
            "additionalProperties": False,
        },
    },
}

_MAX_NAMES_SHOWN: Final = 30


class _TalkArgs(msgspec.Struct, forbid_unknown_fields=True):
    agent: str
    message: str


class _ShareArgs(msgspec.Struct, forbid_unknown_fields=True):
    insight: str
    topic: str = "town"


class LLMBrain:
    """The brain of ``kind = "llm"``: the turn's LLM client decides.

    Args:
        agent: who the agent is.
        config: the brain config (its ``max_tool_rounds``).
    """

    def __init__(self, agent: AgentInfo, config: BrainConfig) -> None:
        self.agent = agent
        self.config = config

    async def step(self, turn: Turn) -> None:
        """Ask the model what to do, run the tools it calls, and remember it all."""
        llm = _client(turn)
        tools = [*await turn.memory.memory_tools(), TALK_TOOL, SHARE_TOOL]
        prompt: list[dict[str, Any]] = [
            *await turn.context(),
            {"role": "user", "content": self._instruction(turn)},
        ]
        for _ in range(self.config.max_tool_rounds):
            response = await llm.complete(prompt, tools=tools)
            replied = _reply(turn, response)
            if replied is None:
                return
            reply, malformed = replied
            results = [
                _tool_result(call, f"error: the arguments are not JSON: {malformed[call.id]}")
                if call.id in malformed
                else await self._answer(turn, call)
                for call in reply.tool_calls
            ]
            turn.remember(reply, *results)
            await turn.flush()
            if not results:
                return
            prompt += [reply.to_openai(), *(r.to_openai() for r in results)]

    async def respond(self, turn: Turn, caller: str, said: str) -> str:
        """One model call on this agent's context: its answer to ``caller``."""
        llm = _client(turn)
        ask = f"{caller} says to you: {said}\nAnswer {caller} in a sentence or two."
        prompt: list[dict[str, Any]] = [*await turn.context(), {"role": "user", "content": ask}]
        replied = _reply(turn, await llm.complete(prompt))
        text = replied[0].text().strip() if replied is not None else ""
        return text or "..."

    def _instruction(self, turn: Turn) -> str:
        others = ", ".join(turn.others[:_MAX_NAMES_SHOWN])
        if len(turn.others) > _MAX_NAMES_SHOWN:
            others += f" and {len(turn.others) - _MAX_NAMES_SHOWN} more"
        return (
            f"Step {turn.step}. You are {turn.agent}, the {self.agent.persona}. The others "
            f"are {others or 'nobody'}. Take your turn: talk to someone, share what you "
            "learned, or use your memory; then say in a sentence what you did."
        )

    async def _answer(self, turn: Turn, call: ToolCall) -> Message:
        """The ``tool`` message answering ``call``; a bad call gets an error the model reads."""
        try:
            content = await self._run_tool(turn, call)
        except (BrainError, msgspec.ValidationError, msgspec.DecodeError) as exc:
            content = f"error: {exc}"
        return content if isinstance(content, Message) else _tool_result(call, content)

    async def _run_tool(self, turn: Turn, call: ToolCall) -> Message | str:
        if call.name == "talk_to":
            talk = msgspec.json.decode(call.arguments, type=_TalkArgs)
            answer = await turn.speak(talk.agent, talk.message, record=False)
            return f"{talk.agent} answered: {answer}"
        if call.name == "share_insight":
            share = msgspec.json.decode(call.arguments, type=_ShareArgs)
            result = await turn.share(share.insight, share.topic or "town")
            return f"shared ({result.status})"
        answered = await turn.memory.answer_tool_call(call)
        if answered is None:
            return f"error: there is no tool named {call.name!r}"
        return answered


def _client(turn: Turn) -> LLMClient:
    if turn.llm is None:
        raise BrainError("the llm brain needs a model: set [simulation.brain] base_url and model")
    return turn.llm


def _tool_result(call: ToolCall, content: str) -> Message:
    return Message(role="tool", tool_call_id=call.id, name=call.name, content=content)


def _reply(turn: Turn, response: Any) -> tuple[Message, dict[str, str]] | None:
    """The model's reply as an assistant message, and the calls whose arguments are
    not JSON (by id: the raw text; the message holds ``{"unparsed": raw}`` for
    them, so that the memory can keep it); None when it said and called nothing.

    Raises:
        BrainError: the answer is not a chat completion.
    """
    malformed: dict[str, str] = {}
    try:
        message = response.choices[0].message
        calls = []
        for c in message.tool_calls or ():
            arguments = c.function.arguments or "{}"
            try:
                msgspec.json.decode(arguments)
            except msgspec.DecodeError:
                malformed[c.id] = arguments[:200]
                arguments = msgspec.json.encode({"unparsed": arguments}).decode()
            calls.append(ToolCall(id=c.id, name=c.function.name, arguments=arguments))
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        raise BrainError(
            f"the model's answer to {turn.agent} is not a chat completion: {exc}"
        ) from exc
    text = message.content if isinstance(message.content, str) else None
    if not calls and not (text and text.strip()):
        return None
    reply = Message(
        role="assistant", name=turn.agent, content=text or None, tool_calls=tuple(calls)
    )
    return reply, malformed
