"""Commands: typed by their reply, and on the wire only their tag and fields."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from actormem.runtime import Actor, Command, Runtime

pytestmark = pytest.mark.anyio


class Total(msgspec.Struct, frozen=True):
    value: int


class Sum(Command[Total], frozen=True):
    numbers: list[int]


class Echo(Command[list[str] | None], frozen=True):
    words: list[str] | None = None


class Ping(Command[None], frozen=True):
    pass


class LoudSum(Sum, frozen=True):
    """A subclass of a command keeps its parent's reply type."""


class Calculator(Actor):
    async def receive(self, message: Any) -> Any:
        match message:
            case Sum(numbers=numbers):
                return Total(sum(numbers))
            case Echo(words=words):
                return words
        return None


def test_the_type_argument_is_the_reply_type() -> None:
    assert Sum.reply_type is Total
    assert Echo.reply_type == list[str] | None
    assert Ping.reply_type is type(None)
    assert LoudSum.reply_type is Total
    for command in (Sum, Echo, Ping):
        msgspec.msgpack.Decoder(command.reply_type)  # a transport can decode the reply


def test_on_the_wire_a_command_is_its_tag_and_its_fields() -> None:
    class Plain(msgspec.Struct, frozen=True, kw_only=True, tag="Sum"):
        numbers: list[int]

    assert msgspec.msgpack.encode(Sum(numbers=[1, 2])) == msgspec.msgpack.encode(
        Plain(numbers=[1, 2])
    )
    assert msgspec.json.encode(Ping()) == b'{"type":"Ping"}'
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(Echo(words=["a"])), type=Sum | Echo)
    assert decoded == Echo(words=["a"])


def test_commands_are_frozen() -> None:
    with pytest.raises(AttributeError):
        Sum(numbers=[1]).numbers = [2]  # type: ignore[misc]


async def test_ask_returns_the_commands_reply() -> None:
    async with Runtime() as rt:
        rt.register("calc", Calculator)
        total = await rt.ask("calc/a", Sum(numbers=[1, 2, 3]))
        assert total == Total(6)
        words = await rt.ref("calc/a").ask(Echo(words=["hi"]))
        assert words == ["hi"]
