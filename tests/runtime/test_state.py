"""The persistence protocol: state kept as a snapshot alone round-trips through its bytes."""

from __future__ import annotations

import msgspec
import pytest

from actormem.runtime.state import DurableChanges, SnapshotState, is_durable


class Counts(msgspec.Struct, frozen=True):
    seen: dict[str, int] = {}


class Counter(SnapshotState[Counts]):
    state_type = Counts

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def export_state(self) -> Counts:
        return Counts(dict(self.seen))

    def load_state(self, state: Counts) -> None:
        self.seen = dict(state.seen)


def test_a_snapshot_part_hands_over_its_whole_state_and_restores_it() -> None:
    first = Counter()
    first.seen["ada"] = 2
    changes = first.durable_changes()
    assert isinstance(changes, DurableChanges)
    assert changes.log_appends == [] and not changes.replace_log
    assert changes.snapshot is not None
    assert first.durable_changes() == changes  # whole, every time
    second = Counter()
    second.durable_restore(changes.snapshot, [])
    assert second.seen == {"ada": 2}
    second.durable_restore(None, [])  # nothing kept: the state stays
    assert second.seen == {"ada": 2}


def test_a_snapshot_of_another_shape_is_refused() -> None:
    with pytest.raises(msgspec.ValidationError):
        Counter().durable_restore(msgspec.msgpack.encode({"seen": "many"}), [])


def test_is_durable_looks_for_both_methods() -> None:
    assert is_durable(Counter())
    assert not is_durable(Counts())
