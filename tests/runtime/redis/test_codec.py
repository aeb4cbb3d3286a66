"""The msgpack codec: typed bodies, typed replies, errors rebuilt by class."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pytest

from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import (
    ActormemError,
    ActorStoppedError,
    HandlerError,
    MessageDecodeError,
    TransportError,
)
from actormem.runtime.redis import Codec


class Item(msgspec.Struct, frozen=True):
    name: str
    score: float = 0.0


class AddItem(msgspec.Struct, frozen=True, tag=True):
    item: Item


class ListItems(msgspec.Struct, frozen=True, tag=True):
    reply_type: ClassVar[Any] = list[Item]
    limit: int = 10


class Untagged(msgspec.Struct, frozen=True):
    x: int


class DomainError(ActormemError, ValueError):
    pass


def _codec() -> Codec:
    return Codec((AddItem, ListItems), (ActorStoppedError, DomainError))


def test_a_registered_body_comes_back_as_its_own_class() -> None:
    codec = _codec()
    env = Envelope(recipient="shop/a", body=AddItem(Item("x", 1.5)), id="abc", correlation=7)
    back = codec.decode_envelope(codec.encode_envelope(env))
    assert back.body == AddItem(Item("x", 1.5))
    assert (back.recipient, back.id, back.correlation) == ("shop/a", "abc", 7)


def test_plain_values_travel_without_registration() -> None:
    codec = _codec()
    for body in ("hi", 3, 2.5, None, [1, "a"]):
        env = Envelope(recipient="echo/a", body=body)
        assert codec.decode_envelope(codec.encode_envelope(env)).body == body


def test_an_unregistered_struct_is_refused_before_sending() -> None:
    with pytest.raises(TransportError, match="Untagged is not registered"):
        _codec().encode_envelope(Envelope(recipient="a/b", body=Untagged(1)))


def test_registering_an_untagged_struct_says_how_to_fix_it() -> None:
    with pytest.raises(TypeError, match="needs tag=True"):
        Codec((Untagged,))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", msgspec.msgpack.encode({"recipient": 3}), msgspec.msgpack.encode([1, 2])],
)
def test_garbage_is_a_decode_error(data: bytes) -> None:
    with pytest.raises(MessageDecodeError):
        _codec().decode_envelope(data)


def test_the_recipient_is_read_without_the_body() -> None:
    codec = _codec()
    data = Codec().encode_envelope(Envelope(recipient="a/b", body={"type": "Nope"}))
    assert codec.recipient(data) == "a/b"
    for garbage in (b"", b"\xc1", msgspec.msgpack.encode({"recipient": 3})):
        assert codec.recipient(garbage) is None


def test_a_type_registered_later_is_decoded_as_its_own_class() -> None:
    codec = Codec((ListItems,))
    data = codec.encode_envelope(Envelope(recipient="shop/a", body=ListItems(3), id="x"))
    assert codec.decode_envelope(data) == Envelope(recipient="shop/a", body=ListItems(3), id="x")
    later = Codec((AddItem,)).encode_envelope(Envelope(recipient="shop/a", body=AddItem(Item("y"))))
    with pytest.raises(MessageDecodeError, match="invalid body"):
        codec.decode_envelope(later)
    codec.register_message_types(AddItem)
    assert codec.decode_envelope(later).body == AddItem(Item("y"))


def test_a_body_of_an_unknown_type_is_a_decode_error() -> None:
    other = Codec()
    data = other.encode_envelope(Envelope(recipient="a/b", body={"type": "Nope", "x": 1}))
    with pytest.raises(MessageDecodeError, match="invalid body"):
        _codec().decode_envelope(data)


def test_a_reply_decodes_into_the_commands_reply_type() -> None:
    codec = _codec()
    data = codec.encode_reply(Reply(3, [Item("a", 1.0), Item("b")]))
    reply = codec.decode_reply(data, ListItems.reply_type)
    assert reply.value == [Item("a", 1.0), Item("b", 0.0)]
    plain = [{"name": "a", "score": 1.0}, {"name": "b", "score": 0.0}]
    assert codec.decode_reply(data).value == plain


def test_a_replys_correlation_is_read_without_its_value() -> None:
    codec = _codec()
    assert codec.reply_correlation(codec.encode_reply(Reply(9, [Item("a")]))) == 9
    assert codec.reply_correlation(codec.encode_reply(Reply(4, error=KeyError("k")))) == 4
    with pytest.raises(MessageDecodeError, match="not a valid reply"):
        codec.reply_correlation(b"\x93\x01")


def test_a_known_error_is_rebuilt_as_its_class() -> None:
    codec = _codec()
    err = ActorStoppedError("shop/a", "stopped after 3 failures")
    reply = codec.decode_reply(codec.encode_reply(Reply(1, error=err)))
    assert isinstance(reply.error, ActorStoppedError)
    assert reply.error.address == "shop/a"
    assert str(reply.error) == str(err)
    domain = codec.decode_reply(codec.encode_reply(Reply(2, error=DomainError("bad input"))))
    assert isinstance(domain.error, DomainError)
    assert str(domain.error) == "bad input"


def test_an_unknown_error_becomes_a_handler_error_naming_it() -> None:
    codec = Codec()
    reply = codec.decode_reply(codec.encode_reply(Reply(1, error=KeyError("k"))))
    assert isinstance(reply.error, HandlerError)
    assert "KeyError" in str(reply.error)


def test_an_unencodable_reply_value_becomes_an_error_reply() -> None:
    codec = _codec()
    reply = codec.decode_reply(codec.encode_reply(Reply(1, object())))
    assert isinstance(reply.error, TransportError)
    assert "cannot be encoded" in str(reply.error)
