"""An ask whose body fails validation, when its type declares ``input_error``, is
the caller's mistake: the codec names the error to answer it with."""

from __future__ import annotations

from typing import ClassVar

import msgspec
import pytest

from actormem.runtime.errors import ActormemError, MessageDecodeError
from actormem.runtime.redis import Codec


class BadInput(ActormemError, ValueError):
    pass


class Budget(msgspec.Struct, frozen=True, tag=True):
    input_error: ClassVar[type[Exception]] = BadInput
    max_tokens: int = 10

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise BadInput(f"max_tokens must be >= 1, got {self.max_tokens}")


class Plain(msgspec.Struct, frozen=True, tag=True):
    count: int = 0


def frame(body: dict[str, object], *, ask: bool = True) -> bytes:
    envelope: dict[str, object] = {"recipient": "memory/alice", "body": body, "id": "c1"}
    if ask:
        envelope.update(reply_to="replies:x", correlation=7)
    return msgspec.msgpack.encode(envelope)


@pytest.fixture
def codec() -> Codec:
    return Codec(message_types=(Budget, Plain))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"type": "Budget", "max_tokens": "100"}, "Budget: max_tokens must be int, got str"),
        ({"type": "Budget", "max_tokens": True}, "Budget: max_tokens must be int, got bool"),
        ({"type": "Budget", "max_tokens": 0}, "max_tokens must be >= 1, got 0"),
    ],
)
def test_a_body_of_a_type_with_an_input_error_is_refused_by_field(
    codec: Codec, body: dict[str, object], reason: str
) -> None:
    data = frame(body)
    with pytest.raises(MessageDecodeError):
        codec.decode_envelope(data)
    refusal = codec.refusal(data)
    assert isinstance(refusal, BadInput)
    assert reason in str(refusal)


@pytest.mark.parametrize(
    "data",
    [
        frame({"type": "Plain", "count": "x"}),  # declares no input_error
        frame({"type": "Nope", "x": 1}),  # no registered type
        frame({"type": "Budget", "max_tokens": 5}),  # valid
        b"\xc1not msgpack",
        msgspec.msgpack.encode({"recipient": "memory/alice", "body": [1, 2]}),
    ],
)
def test_anything_else_is_not_a_refusal(codec: Codec, data: bytes) -> None:
    assert codec.refusal(data) is None
