"""What a transport keeps of a durable memory, kept the way the Redis commit does."""

from __future__ import annotations

from actormem.runtime.state import Durable, DurableChanges


class StoredState:
    """A durable actor's stored log and snapshot, changed as the commit script does:
    the log extended (or replaced), the snapshot set (an empty one deletes it)."""

    def __init__(self) -> None:
        self.log: list[bytes] = []
        self.snapshot: bytes | None = None

    def keep(self, actor: Durable) -> DurableChanges:
        """Store ``actor``'s changes since the last call; return them."""
        changes = DurableChanges(*actor.durable_changes())
        if changes.replace_log:
            self.log = []
        self.log += changes.log_appends
        if changes.snapshot is not None:
            self.snapshot = changes.snapshot or None
        return changes
