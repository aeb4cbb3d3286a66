"""The messages between an agent's memory actor and the compressor.

The memory actor asks ``compressor/<i>`` with a :class:`CompressRequest` holding a
snapshot of its working view; the compressor answers with a
:class:`CompressionOutcome` whose ``messages`` replace exactly that snapshot.
Both are tagged msgspec Structs so the Redis transport can carry them.
"""

from __future__ import annotations

import msgspec

from actormem.actors.messages import Message
from actormem.runtime import Command

__all__ = ("CompressRequest", "CompressionOutcome")


class CompressionOutcome(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """What one compression did.

    Attributes:
        version: the request's version, so the memory actor applies the outcome
            only to the snapshot it was computed from.
        messages: the new working view, replacing exactly the snapshot; every
            message has its ``tokens`` counted.
        offloaded: original messages stored away by this compression, keyed by the
            reload id that a message of ``messages`` names in its hint.
        strategies: the strategies that changed the view, in the order they ran.
        passes: strategy passes that proposed a change (kept or not); the pass cap
            counts these.
        tokens_before: tokens of the snapshot.
        tokens_after: tokens of ``messages``.
        messages_before: messages in the snapshot.
        messages_after: messages in ``messages``.
        under_budget: True when neither threshold is exceeded any more.
        summarizer: the summarizer used (``offline`` or ``openai``).
        fell_back: True when an LLM summary failed and the offline one was used.
        latency_s: seconds the compression took.
        note: what happened, in words (why it stopped over budget, say).
        agent: the request's agent, and
        request: the request's id: the asker checks the answer is to its own request.
    """

    version: int
    messages: list[Message]
    offloaded: dict[str, list[Message]]
    strategies: list[str]
    passes: int
    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    under_budget: bool
    summarizer: str
    fell_back: bool
    latency_s: float
    note: str
    agent: str = ""
    request: str = ""

    @property
    def tokens_saved(self) -> int:
        """Tokens the compression took out of the working view."""
        return self.tokens_before - self.tokens_after


class CompressRequest(Command[CompressionOutcome], frozen=True, kw_only=True):
    """Ask the compressor to bring an agent's working view under budget.

    Attributes:
        agent: the agent whose view this is (for logs and pool routing).
        messages: a snapshot of the whole working view, tokens counted.
        version: the memory actor's view version when the snapshot was taken.
        request: an id for this request, echoed in the outcome.
    """

    agent: str
    messages: list[Message]
    version: int
    request: str = ""
