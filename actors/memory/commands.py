"""The typed commands an agent memory actor serves, and their replies.

Commands are :class:`~actormem.runtime.Command` types (frozen, tagged msgspec
Structs): the tag lets one decoder read any of them off a Redis stream, and the
type argument, the reply's type, types ``ask`` and tells a remote asker how to
decode the reply. New fields go last with defaults; a field's type never changes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

import msgspec

from actormem.actors.compression.protocol import CompressionOutcome
from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import Message, Role, ToolCall
from actormem.actors.pool.commands import AgentCommand
from actormem.actors.pool.insights import Insight
from actormem.actors.recall.episodes import Episode
from actormem.actors.recall.keyed import FoundEntry, KeyedEntry
from actormem.actors.recall.longterm import Recalled
from actormem.runtime import Command

__all__ = (
    "EXPORT_VERSION",
    "Add",
    "AddResult",
    "AnswerToolCall",
    "Clear",
    "CompressionDone",
    "Context",
    "Delete",
    "DeleteEntry",
    "EndRun",
    "Expire",
    "Export",
    "Forget",
    "Get",
    "GetEntry",
    "HeldInsights",
    "ListNamespaces",
    "Load",
    "MemoryCommand",
    "MemoryExport",
    "MemoryStats",
    "MemoryTools",
    "Prune",
    "PruneResult",
    "PutEntry",
    "RecallEpisode",
    "Record",
    "Reload",
    "Retrieve",
    "Search",
    "SearchEntries",
    "SetSummary",
    "StartEpisode",
    "Stats",
    "SummarizeEpisodes",
    "ToPool",
    "Update",
)

#: The version of the export format written by ``Export`` and read by ``Load``.
EXPORT_VERSION = 1

Scope = Literal["working", "history", "offloaded"]
SearchMode = Literal["substring", "ranked"]


class AddResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``Add`` stored: the ids and token counts of the messages, in order.

    Attributes:
        ids: the stored messages' ids.
        tokens: each message's token count.
        size: messages in the working view afterwards.
        working_tokens: tokens of the whole working view afterwards.
    """

    ids: list[str]
    tokens: list[int]
    size: int
    working_tokens: int


class Add(Command[AddResult], frozen=True):
    """Append messages to the working view and to the original history.

    Each message's id is part of the command (fixed when the message was made), so
    the command sent again (an ask with no reply yet) stores nothing twice, and a
    new ``Add`` of a message already stored is refused, naming its id.

    Attributes:
        messages: the messages, in order.
        encoding: the tiktoken encoding the sender counted each message's
            ``tokens`` with (the handle counts them where the messages are made).
            When it is the memory's own encoding, the memory takes those counts
            (or checks them, with ``[memory] verify_token_counts``); None, another
            encoding or a message with no count (``tokens`` < 0): the memory
            counts the message itself.
    """

    #: Adds to one agent read together over Redis are stored as one change set.
    batch: ClassVar[bool] = True

    messages: list[Message]
    encoding: str | None = None


class Get(Command[list[Message]], frozen=True):
    """Messages matching every given filter, oldest first.

    Attributes:
        recent_n: only the last ``n`` of the matches.
        roles / names: the message's role / name is one of these.
        metadata: every key equals the given value.
        since / until: ``since <= timestamp < until``.
        important: only messages tagged ``important`` or with importance at or
            above the memory's ``important_threshold``.
        scope: ``working`` (the view the agent sees), ``history`` (everything
            ever added, untouched by prune and compression) or ``offloaded`` (the
            originals compression stored away, reachable by reload).
    """

    recent_n: int | None = None
    roles: list[Role] | None = None
    names: list[str] | None = None
    metadata: dict[str, Any] | None = None
    since: float | None = None
    until: float | None = None
    important: bool = False
    scope: Scope = "working"


class Search(Command[list[Message]], frozen=True):
    """Text search: case-insensitive ``substring`` (oldest first) or BM25 ``ranked``."""

    query: str
    mode: SearchMode = "substring"
    k: int | None = None
    roles: list[Role] | None = None
    scope: Scope = "working"


class Delete(Command[int], frozen=True):
    """Delete messages from the working view by id and/or index (all or none)."""

    ids: list[str] = []
    indices: list[int] = []


class Update(Command[Message], frozen=True):
    """Change one working-view message in place; the reply is the message as updated.

    Attributes:
        id: the message's id.
        content: the new content (None: unchanged).
        metadata: the new metadata, replacing all of it (None: unchanged).
        importance: the new importance (None: unchanged).
        set_metadata: keys to set in the metadata (after ``metadata``).
        remove_metadata: keys to remove from the metadata (absent keys are ignored).
    """

    id: str
    content: str | dict[str, Any] | list[Any] | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = None
    set_metadata: dict[str, Any] = {}
    remove_metadata: list[str] = []


class SetSummary(Command[Message], frozen=True):
    """Replace working-view messages by one summary the caller wrote (a compression
    by hand); the reply is the summary message. The replaced messages are kept
    under the offload id in the summary's metadata ``reload_id``.

    Attributes:
        text: the summary.
        replaces: ids of the working-view messages it stands for (whole tool pairs).
    """

    text: str
    replaces: list[str]


class Clear(Command[int], frozen=True):
    """Empty the working view; with ``history`` also erase the original history,
    the offloads, long-term memory, episodes and held insights (and the stored
    copies of the agent's commands); the reply is how many working messages went."""

    history: bool = False


class Forget(Command[int], frozen=True):
    """Erase the agent: everything :class:`Clear` with ``history`` erases, its
    counters, its stored state and its session file, and (through the pool's
    ``ForgetSource``) the text of what it shared; afterwards it is as if it never
    existed. The reply is how many history messages were erased."""


class Expire(Command[bool], frozen=True):
    """Forget the agent if it has been idle for ``retention.ttl`` (sent by the
    retention sweeper, see :mod:`actormem.actors.memory.expiry`); the reply says
    whether it was forgotten. It does not count as activity.

    ``due``: sent because the due time stored with the agent's state came. An
    agent found with no activity known then had its stored state expire since
    (no worker served it in time): it is forgotten all the same, which erases the
    copies of its text its state no longer names (stream entries, dead letters,
    what it shared).
    """

    due: bool = False


class MemoryStats(msgspec.Struct, frozen=True, kw_only=True):
    """Sizes of one agent's memory.

    Attributes:
        size: messages in the working view.
        history_size: messages in the original history.
        working_tokens: tokens of the working view (what a full context costs,
            before the reply priming).
        history_tokens: tokens of everything ever added.
        offloaded: offloaded blocks that can be reloaded.
    """

    size: int
    history_size: int
    working_tokens: int
    history_tokens: int
    offloaded: int
    insights_held: int = 0
    longterm_entries: int = 0
    episodes: int = 0
    core_messages: int = 0
    compressions: int = 0
    tokens_saved: int = 0
    compressing: bool = False
    peak_working_tokens: int = 0
    peak_size: int = 0


class Stats(Command[MemoryStats], frozen=True):
    """Sizes and token totals of the memory."""


class MemoryExport(msgspec.Struct, frozen=True, kw_only=True):
    """A memory's content, as written by ``export`` and read by ``load``.

    ``extra`` is the caller's own JSON-able data (a run id, a scenario name), kept
    in the file and given back by :func:`read_export`; the memory does not read it.
    """

    version: int = EXPORT_VERSION
    agent: str = ""
    working: list[Message] = []
    history: list[Message] = []
    offloaded: dict[str, list[Message]] = {}
    exported_at: float = 0.0
    extra: dict[str, Any] = {}


class Export(Command[MemoryExport], frozen=True):
    """Return the memory's content (working view, history, offloaded blocks)."""

    include_history: bool = True


class Load(Command[int], frozen=True):
    """Load exported content: replace the working view (``overwrite``) or merge into it.

    Merging appends the messages whose ids the working view does not hold yet.
    The original history only ever grows: loaded messages it lacks are appended.
    """

    data: MemoryExport
    overwrite: bool = False


class PruneResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``Prune`` removed from the working view."""

    removed: int
    working_tokens: int


class Prune(Command[PruneResult], frozen=True):
    """Drop the oldest messages until the working view fits ``max_tokens``.

    Tool calls and their results go together; with ``preserve_system`` the leading
    system messages always stay.
    """

    max_tokens: int
    preserve_system: bool = True


class Context(Command[list[dict[str, Any]]], frozen=True):
    """The working view as an OpenAI message list within ``max_tokens`` (reply included).

    After the leading system messages comes one system message with the recall
    blocks (core memory, received insights, recalled long-term memories) ranked
    for ``query`` (the newest user message by default), as quoted data.
    """

    max_tokens: int | None = None
    query: str | None = None


class Reload(Command[list[Message]], frozen=True):
    """The original messages behind an offload id."""

    offload_id: str


class Record(Command[int], frozen=True):
    """Record messages in long-term memory; the reply is how many memories that made."""

    messages: list[Message]


class Retrieve(Command[list[Recalled]], frozen=True):
    """Long-term memories for ``query``, best first (recency, importance, relevance)."""

    query: str
    k: int | None = None


class MemoryTools(Command[list[dict[str, Any]]], frozen=True):
    """The OpenAI tool schemas this agent's long-term memory offers (by control mode)."""


class AnswerToolCall(Command[Message | None], frozen=True):
    """Run a ``record_to_memory`` / ``retrieve_from_memory`` call; None for other tools."""

    call: ToolCall


class StartEpisode(Command[Episode | None], frozen=True):
    """Close the current episode (returned, if it held anything) and open a new one."""

    metadata: dict[str, Any] = {}


class RecallEpisode(Command[list[Episode]], frozen=True):
    """The past episodes most relevant to ``query``, best first."""

    query: str
    k: int = 1


class SummarizeEpisodes(Command[list[str]], frozen=True):
    """A short summary of every closed episode."""


class HeldInsights(Command[list[Insight]], frozen=True):
    """The insights this agent received, most relevant to ``query`` first."""

    query: str | None = None
    k: int = 10


class CompressionDone(Command[None], frozen=True):
    """The compressor's answer, told back to the memory actor (internal).

    ``outcome`` is None when the compression failed; ``error`` then says why.
    ``token`` is the secret of the request in flight: a CompressionDone that does
    not carry it (one nobody asked for) changes nothing.
    """

    version: int
    outcome: CompressionOutcome | None = None
    error: str | None = None
    token: str = ""


class ToPool(Command[Any], frozen=True):
    """Send ``command`` to the insight pool as this agent.

    The memory actor refuses a command that names another agent (the ``source``
    of a share or fact, the ``agent`` of a subscription) and hands the rest on to
    the pool (``pool/main``) as itself: the pool takes commands that act for an
    agent only from that agent's memory actor (the envelope's sender), and answers
    the asker directly. The handle's ``share``, ``register_fact``, ``subscribe``
    and ``unsubscribe`` send this for you. Replies the pool's answer to ``command``.
    """

    command: AgentCommand

    #: The memory forwards it and keeps no reply; the pool applies each command once
    #: by the command's own key (a share's ``id``; subscribing is idempotent), so an
    #: ask that went unanswered is sent again as a new command.
    resend_as_new = True


class EndRun(Command[None], frozen=True):
    """A run ended: apply the retention policy (clear single_run, save persistent)."""


class PutEntry(Command[KeyedEntry], frozen=True):
    """Store a keyed long-term entry, replacing the one under the same namespace and
    key (see :mod:`actormem.actors.recall.keyed`); the reply is the entry stored.

    Attributes:
        namespace: its namespace (1..16 labels).
        key: its key.
        value: a JSON object.
        text: what a ranked search matches (None: the value's strings).
        importance: 0..1 (None: ``[longterm] default_importance``).
        ttl: seconds it lives after its last write or refreshing read (None: for ever).
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    text: str | None = None
    importance: float | None = None
    ttl: float | None = None


class GetEntry(Command[KeyedEntry | None], frozen=True):
    """The keyed entry under (namespace, key), or None; ``refresh_ttl`` restarts its
    time to live."""

    namespace: tuple[str, ...]
    key: str
    refresh_ttl: bool = True


class DeleteEntry(Command[bool], frozen=True):
    """Delete the keyed entry under (namespace, key); the reply says whether there was one."""

    namespace: tuple[str, ...]
    key: str


class SearchEntries(Command[list[FoundEntry]], frozen=True):
    """Keyed entries within a namespace prefix whose value meets ``filter``: ranked
    for ``query`` by the long-term score, or the newest first without one."""

    prefix: tuple[str, ...] = ()
    query: str | None = None
    filter: dict[str, Any] | None = None
    limit: int = 10
    offset: int = 0
    refresh_ttl: bool = True


class ListNamespaces(Command[list[tuple[str, ...]]], frozen=True):
    """The namespaces of the keyed entries that start with ``prefix`` and end with
    ``suffix`` (``*`` matches any label), cut to ``max_depth`` labels, sorted."""

    prefix: tuple[str, ...] = ()
    suffix: tuple[str, ...] = ()
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0


MemoryCommand = (
    Add
    | Get
    | Search
    | Delete
    | Update
    | SetSummary
    | Clear
    | Forget
    | Expire
    | Stats
    | Export
    | Load
    | Prune
    | Context
    | Reload
    | Record
    | Retrieve
    | MemoryTools
    | AnswerToolCall
    | StartEpisode
    | RecallEpisode
    | SummarizeEpisodes
    | HeldInsights
    | EndRun
    | CompressionDone
    | ToPool
    | PutEntry
    | GetEntry
    | DeleteEntry
    | SearchEntries
    | ListNamespaces
)

# A command over Redis may come from any client: one whose fields fail validation
# on arrival is answered with MemoryInputError (see actormem.runtime.redis.codec).
for _command in get_args(MemoryCommand):
    setattr(_command, "input_error", MemoryInputError)  # noqa: B010
