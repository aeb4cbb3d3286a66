"""An agent memory's durable state: what to store after a command, and the rebuild.

A memory stores its history as a log and the rest as a snapshot (see
:mod:`.snapshot`). These functions are the :class:`AgentMemory` side of the
protocol of :mod:`actormem.runtime.state`; the actor calls them with itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actormem.actors.memory.snapshot import (
    decode_snapshot,
    encode_snapshot,
    restore_episodes,
    restore_store,
)
from actormem.actors.messages import encode_message
from actormem.runtime.state import DurableChanges

if TYPE_CHECKING:
    from actormem.actors.memory.actor import AgentMemory

__all__ = ("durable_changes", "durable_restore")


def durable_changes(memory: AgentMemory) -> DurableChanges:
    """History messages added since the last call, and the rest as a snapshot when
    it changed beyond what replaying those adds restores (see :func:`durable_restore`).

    A plain add (the common command) thus stores only its messages: the cost of a
    commit does not grow with the agent's working view or recall.
    """
    store = memory._store
    deliveries = memory._deliveries
    appends = [encode_message(m) for m in store.log_pending]
    store.log_pending = []
    discarded, memory._discarding = memory._discarding, False
    if store.erased:
        # A wipe: the stored log is replaced, the store erases its other copies;
        # a forgotten agent's snapshot is deleted (what follows is replayed).
        # The snapshot holds the inbox whole: no delivery goes into the new log.
        deliveries.reset()
        store.erased = store.dirty = False
        forgotten, memory._forgotten = memory._forgotten, False
        recall = memory._recall
        memory._saved_edits = recall.edits if recall is not None else 0
        snapshot = b"" if forgotten and not appends else _snapshot(memory)
        return DurableChanges(
            appends,
            snapshot,
            replace_log=True,
            erase=True,
            expire_after=memory._idle.key_ttl,
            discarded=discarded,
            due_at=memory._idle.due_at if snapshot else None,
        )
    recall = memory._recall
    edits = recall.edits if recall is not None else 0
    if deliveries.rewrite_due(len(store.history)):
        # The log is written again, its history alone, beside a snapshot of the
        # inbox as it is (see DeliveryLog.rewrite_due).
        deliveries.reset()
        store.history_skip, store.dirty = 0, False
        memory._saved_edits = edits
        return DurableChanges(
            [encode_message(m) for m in store.history],
            _snapshot(memory),
            replace_log=True,
            expire_after=memory._idle.key_ttl,
            discarded=discarded,
            due_at=memory._idle.due_at,
        )
    if deliveries.pending:
        appends += deliveries.flush()
    if not store.dirty and edits == memory._saved_edits:
        return DurableChanges(appends, expire_after=memory._idle.key_ttl, discarded=discarded)
    store.dirty = False
    memory._saved_edits = edits
    snapshot = _snapshot(memory)
    return DurableChanges(
        appends,
        snapshot,
        expire_after=memory._idle.key_ttl,
        discarded=discarded,
        due_at=memory._idle.due_at,
    )


def _snapshot(memory: AgentMemory) -> bytes:
    idle = memory._idle
    idle.stored_at = idle.active_at
    return encode_snapshot(
        memory._store,
        memory._compaction,
        memory._recall,
        memory._unobserved,
        idle.active_at,
        memory._episodes,
        memory._deliveries.stored,
    )


def durable_restore(memory: AgentMemory, snapshot: bytes | None, log: list[bytes]) -> None:
    """Rebuild the memory from what the transport stored (on activation): the
    snapshot, then the messages added after it, replayed as the adds they were."""
    store = memory._store
    store.durable = True
    state = decode_snapshot(snapshot)
    by_id, replay, deliveries, logged = restore_store(store, memory._compaction, state, log)
    memory._deliveries.reset(logged)
    memory._idle.restored(state.active_at)
    if state.unobserved is not None:
        unobserved = [by_id[i] for i in state.unobserved if i in by_id] + replay
        memory._unobserved = unobserved or None
    else:
        if state.recall:
            memory.recall.load_component_states(state.recall)
        if state.episodes is not None:
            restore_episodes(memory.recall.episodes, state.episodes, store.history)
        if state.awaiting_reply:
            memory.recall.awaiting_reply = [by_id[i] for i in state.awaiting_reply if i in by_id]
        if replay:
            memory.recall.observe(replay)
    if deliveries:
        inbox = memory.recall.inbox
        for logged_delivery in deliveries:
            inbox.deliver(logged_delivery.pool, logged_delivery.delivery)
        memory.recall.changed(logged=True)
    memory._saved_edits = memory._recall.edits if memory._recall is not None else 0
    store.dirty = False
