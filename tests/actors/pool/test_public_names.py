"""Every name the pool and long-term memory modules declare in ``__all__`` exists."""

from __future__ import annotations

import importlib

import msgspec
import pytest

MODULES = [
    "actormem.actors.pool.insights",
    "actormem.actors.pool.actor",
    "actormem.actors.pool.commands",
    "actormem.actors.recall.longterm",
    "actormem.actors.recall.tools",
    "actormem.actors.recall.episodes",
    "actormem.actors.retention",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_names_are_importable_and_sorted(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert isinstance(exported, tuple) and len(set(exported)) == len(exported)
    for attr in exported:
        assert hasattr(module, attr), f"{name}.{attr}"


def test_commands_are_frozen_tagged_and_name_a_decodable_reply_type() -> None:
    from actormem.actors.pool.commands import PoolCommand
    from actormem.actors.pool.insights import InsightDelivery

    for command in [*PoolCommand.__args__, InsightDelivery]:  # type: ignore[attr-defined]
        msgspec.msgpack.Decoder(command.reply_type)  # a type a transport can decode
        assert command.__struct_config__.tag == command.__name__
        assert command.__struct_config__.frozen
