"""autogen-core's side of the peers benchmark (imported only when it runs).

No ``from __future__ import annotations`` here: autogen-core reads the handler's
type hints at class creation and needs them as real objects.
"""

import time
from dataclasses import dataclass

from autogen_core import (
    AgentId,
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    TopicId,
    TypeSubscription,
    message_handler,
)


@dataclass
class Text:
    content: str


class Keeper(RoutedAgent):  # type: ignore[misc]
    """Keeps every text it gets, as a memory would."""

    def __init__(self) -> None:
        super().__init__("keeps messages")
        self.kept: list[str] = []

    @message_handler  # type: ignore[misc, untyped-decorator]
    async def on_text(self, message: Text, ctx: MessageContext) -> Text:
        self.kept.append(message.content)
        return message


async def publish_and_send(texts: list[str], agents: int) -> tuple[float, float]:
    """Publish every text to one of ``agents`` agents, then send_message round trips."""
    rt = SingleThreadedAgentRuntime()
    await Keeper.register(rt, "keeper", Keeper)
    await rt.add_subscription(TypeSubscription(topic_type="town", agent_type="keeper"))
    rt.start()
    started = time.perf_counter()
    for i, text in enumerate(texts):
        await rt.publish_message(Text(text), TopicId("town", source=f"a{i % agents}"))
    await rt.stop_when_idle()
    publish = len(texts) / (time.perf_counter() - started)
    rt.start()
    n = max(1, len(texts) // 4)
    started = time.perf_counter()
    for i in range(n):
        await rt.send_message(Text(texts[i]), AgentId("keeper", f"a{i % agents}"))
    send = n / (time.perf_counter() - started)
    await rt.stop()
    return publish, send
