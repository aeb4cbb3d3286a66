"""The recall commands a memory serves: held insights, long-term memory, memory
tools, episodes, the end of a run and keyed entries.

Each is served by the agent's :class:`~actormem.actors.recall.agent.AgentRecall`.
"""

from __future__ import annotations

from typing import Any, Final

from actormem.actors.compression import CONTEXT_RELOAD_TOOL
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory._pool_side import serve_keyed
from actormem.actors.memory.commands import (
    DeleteEntry,
    EndRun,
    GetEntry,
    HeldInsights,
    ListNamespaces,
    MemoryTools,
    PutEntry,
    RecallEpisode,
    Record,
    Retrieve,
    SearchEntries,
    StartEpisode,
    SummarizeEpisodes,
)
from actormem.actors.memory.store import MessageStore
from actormem.actors.recall.agent import AgentRecall

__all__ = ("RECALL_COMMANDS", "serve_recall")

#: The commands :func:`serve_recall` serves.
RECALL_COMMANDS: Final = (
    HeldInsights,
    Record,
    Retrieve,
    MemoryTools,
    StartEpisode,
    RecallEpisode,
    SummarizeEpisodes,
    EndRun,
    PutEntry,
    GetEntry,
    DeleteEntry,
    SearchEntries,
    ListNamespaces,
)


async def serve_recall(
    recall: AgentRecall, message: Any, store: MessageStore, compacts: bool
) -> Any:
    """Serve one of :data:`RECALL_COMMANDS` and return its answer.

    Args:
        recall: the agent's recall.
        message: the command.
        store: the agent's messages (a record counts its messages there).
        compacts: compression is on (the memory tools then include the reload tool).

    Raises:
        MemoryInputError: a command that is none of them, or one the recall refuses.
    """
    match message:
        case HeldInsights(query=query, k=k):
            return recall.inbox.relevant(query, k)
        case Record(messages=messages):
            recall.changed()
            counted = store.counted(messages, "record")
            return len(await recall.longterm.record_messages(counted))
        case Retrieve(query=query, k=k):
            # Its touches go with the next snapshot (see AgentRecall.edits).
            return await recall.longterm.retrieve(query, k)
        case MemoryTools():
            tools = recall.control.tools()
            if compacts:
                tools = [*tools, CONTEXT_RELOAD_TOOL]
            return tools
        case StartEpisode(metadata=metadata):
            recall.changed()
            return recall.episodes.start_episode(metadata)
        case RecallEpisode(query=query, k=k):
            return recall.episodes.recall_episodes(query, k)
        case SummarizeEpisodes():
            return recall.episodes.summarize_episodes()
        case EndRun():
            recall.changed()
            await recall.retention.end_run()
            return None
        case PutEntry() | GetEntry() | DeleteEntry() | SearchEntries() | ListNamespaces():
            return serve_keyed(recall, message)
    raise MemoryInputError(f"recall does not serve {type(message).__name__}")
