"""A caller's edits of a working view: ``update`` (and marks) and ``set_summary``.

An update changes the working-view message in place (same id) and appends an
*edit record* to the original history: the message as edited, under the id
``<id>.edit<n>``, its metadata holding ``edit_of`` (the original's id) and
``edited_at``; the original stays in the history untouched. ``set_summary``
compresses by hand: the replaced messages become one summary, and stay reloadable
as an offload, as the compressor's are, under a reload id made from the agent and
the view's version, as the compressor's are (the same run makes the same ids).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from actormem.actors.compression.draft import reload_id
from actormem.actors.compression.offload import offload_hint
from actormem.actors.conversation import group_units
from actormem.actors.errors import MemoryInputError
from actormem.actors.memory.store import MessageStore
from actormem.actors.messages import Message

__all__ = ("set_summary", "update")


def update(
    store: MessageStore,
    id: str,
    changes: dict[str, Any],
    set_metadata: dict[str, Any],
    remove_metadata: Sequence[str],
) -> Message:
    """Change the working-view message ``id`` (``changes``: new field values;
    then ``set_metadata`` and ``remove_metadata`` applied to its metadata),
    record the edit in the history and return the message as updated.

    Raises:
        MemoryInputError: no message ``id`` in the working view, or the edited
            message breaks the message rules or the size limit (nothing changes).
    """
    pos = next((i for i, m in enumerate(store.working) if m.id == id), None)
    if pos is None:
        raise MemoryInputError(f"update: no message with id {id!r} in the working view")
    old = store.working[pos]
    metadata = dict(changes.get("metadata", old.metadata))
    metadata.update(set_metadata)
    for key in remove_metadata:
        metadata.pop(key, None)
    fields = {**msgspec.structs.asdict(old), **changes, "metadata": metadata, "tokens": -1}
    try:
        edited = Message(**fields)  # through __post_init__: the field checks
    except (TypeError, ValueError, MemoryInputError) as exc:
        raise MemoryInputError(f"update: {exc}") from None
    (new,) = store.counted([edited], "update")
    serial = 1
    while f"{id}.edit{serial}" in store.history_ids:
        serial += 1
    record = msgspec.structs.replace(
        new,
        id=f"{id}.edit{serial}",
        metadata={**new.metadata, "edit_of": id, "edited_at": time.time()},
    )
    working = list(store.working)
    working[pos] = new
    store.set_working(working)
    store.append_history([record])
    store.edited.add(id)
    store.note_peak()
    return new


def set_summary(
    store: MessageStore, text: str, replaces: Sequence[str], agent: str = ""
) -> Message:
    """Replace the working-view messages ``replaces`` by one summary message at
    the place of the first of them; keep them as an offload (reloadable by the
    summary's ``reload_id``, made from ``agent`` and the view's version) and return
    the summary.

    Raises:
        MemoryInputError: no ids, an id twice or not in the working view, ids
            that would split a tool call from its result (named), or a summary
            over the size limit (nothing changes).
    """
    if not replaces:
        raise MemoryInputError("set_summary: replaces must name at least one message")
    wanted = set(replaces)
    if len(wanted) != len(replaces):
        twice = next(i for i in replaces if replaces.count(i) > 1)
        raise MemoryInputError(f"set_summary: message id {twice!r} appears twice")
    working = store.working
    positions = [pos for pos, m in enumerate(working) if m.id in wanted]
    if len(positions) != len(wanted):
        missing = sorted(wanted - {working[pos].id for pos in positions})
        raise MemoryInputError(
            f"set_summary: no message with id {missing[0]!r} in the working view"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    for unit in group_units(working):
        ids = [m.id for m in unit.messages]
        inside = [i for i in ids if i in wanted]
        if inside and len(inside) != len(ids):
            outside = [i for i in ids if i not in wanted]
            raise MemoryInputError(
                f"set_summary: replacing {inside} would split a tool call from its "
                f"result; replace {outside} with them, or neither"
            )
    originals = [working[pos] for pos in positions]
    offload_id = reload_id(agent, store.version, "s")
    weights = [m.importance for m in originals if m.importance is not None]
    summary = Message(
        role="assistant",
        content=f"{text}\n{offload_hint(offload_id, f'{len(originals)} messages')}",
        metadata={
            "compressed": "manual",
            "strategy": "set_summary",
            "reload_id": offload_id,
            "summarized_ids": [m.id for m in originals],
        },
        importance=max(weights) if weights else None,
        timestamp=originals[-1].timestamp,
    )
    (summary,) = store.counted([summary], "set_summary")
    first = positions[0]
    doomed = set(positions)
    view = [m for pos, m in enumerate(working) if pos not in doomed]
    view.insert(first, summary)
    store.set_working(view)
    store.offloaded[offload_id] = originals
    store.note_peak()
    return summary
