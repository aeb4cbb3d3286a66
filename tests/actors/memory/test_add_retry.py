"""Adding is safe to retry: a message's id is fixed before its add is sent, on both
transports, so the same messages added again are never stored twice."""

from __future__ import annotations

import pytest

from actormem.actors import MemoryInputError, MemoryRuntime
from actormem.actors.memory.handle import to_message

pytestmark = pytest.mark.anyio


async def test_the_same_messages_added_again_are_refused_naming_the_stored_id(
    memory_rt: MemoryRuntime,
) -> None:
    memory = memory_rt.memory("ben")
    messages = [
        to_message({"role": "user", "content": "where is the key?"}),
        to_message({"role": "assistant", "content": "under the mat"}),
    ]
    first = await memory.add(messages)
    assert first.ids == [m.id for m in messages]
    # What a caller does after a timeout: add the same values again. Applied
    # already, so refused, naming the id; nothing is stored twice.
    with pytest.raises(MemoryInputError, match=f"message id '{messages[0].id}' is already stored"):
        await memory.add(messages)
    history = await memory.get(scope="history")
    assert [m.id for m in history] == first.ids
