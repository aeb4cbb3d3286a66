"""Real msgpack frames, as the Redis transport writes them, and ways to break them.

:func:`real_frames` builds envelopes around the app's own commands (and replies,
and stored messages) with the codec the transport uses; :func:`mutants` breaks
them the ways a fuzzer should: flipped and reserved bytes (``0xc1``), lengths
near 2^32, truncation, wrong types and nesting. Everything is seeded.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Final

import msgspec

import actormem.actors.app.wiring  # noqa: F401 (registers the app's message types with the codec)
from actormem.actors.memory.commands import Add, AddResult, Context, Get, Search
from actormem.actors.messages import Message, ToolCall, encode_message
from actormem.actors.pool.commands import Share
from actormem.actors.pool.insights import Insight, InsightDelivery
from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.redis import default_codec

__all__ = ("deep", "huge_lengths", "mutants", "real_frames")

#: msgpack headers that announce a length in the next four bytes.
_LEN32: Final = (0xC6, 0xDB, 0xDD, 0xDF)  # bin32, str32, array32, map32


def _messages() -> list[Message]:
    return [
        Message(role="system", content="You are Alice."),
        Message(role="user", name="bob", content="weather in Paris?", metadata={"k": [1, 2.5]}),
        Message(role="assistant", tool_calls=(ToolCall("c1", "weather", '{"city":"Paris"}'),)),
        Message(role="tool", tool_call_id="c1", content={"sunny": True, "t": 21}),
        Message(role="agent_call", name="carol", content=[{"type": "text", "text": "hi"}]),
    ]


def real_frames(reply_to: str = "am:{r:client}:replies") -> dict[str, bytes]:
    """Named frames: envelopes (tells and asks), replies and stored messages.

    Args:
        reply_to: the reply stream the asks name.
    """
    messages = _messages()
    insight = Insight(
        id="i1", text="opens at 7", topic="town", importance=0.5, source="bob", created=1.0
    )
    bodies = {
        "add": Add(messages=messages),
        "get": Get(recent_n=3, roles=["user"], metadata={"k": 1}, scope="history"),
        "search": Search(query="paris", mode="ranked", k=2),
        "context": Context(max_tokens=4096),
        "share": Share(text="the bakery opens at 7", source="alice", topic="town"),
        "delivery": InsightDelivery(insight=insight),
    }
    frames = {}
    for name, body in bodies.items():
        envelope = Envelope(
            recipient="memory/alice",
            body=body,
            id=f"cmd-{name}",
            sender="memory/bob",
            reply_to=reply_to,
            correlation=7,
            deadline=1e9,
        )
        frames[f"envelope.{name}"] = default_codec.encode_envelope(envelope)
    frames["envelope.tell"] = default_codec.encode_envelope(
        Envelope(recipient="memory/alice", body=Add(messages=messages[:2]), id="cmd-tell")
    )
    result = AddResult(ids=["m1", "m2"], tokens=[5, 9], size=2, working_tokens=14)
    frames["reply.value"] = default_codec.encode_reply(Reply(7, result))
    frames["reply.error"] = default_codec.encode_reply(Reply(7, error=ValueError("no")))
    frames["message"] = encode_message(messages[3])
    frames["messages"] = msgspec.msgpack.encode(messages)
    return frames


def huge_lengths(frame: bytes) -> Iterator[bytes]:
    """``frame`` with a length near 2^32 announced where a string, array or map starts."""
    for i, byte in enumerate(frame):
        if 0xA0 <= byte <= 0xBF or 0x90 <= byte <= 0x9F or 0x80 <= byte <= 0x8F:
            for header in _LEN32:
                for length in (0xFFFFFFFF, 0xFFFFFFF0, 0x80000000):
                    yield frame[:i] + bytes([header]) + length.to_bytes(4, "big") + frame[i + 1 :]
            return


def deep(depth: int, inner: bytes = b"\xc0") -> bytes:
    """An envelope whose body is ``depth`` nested one-element arrays."""
    head = msgspec.msgpack.encode({"recipient": "memory/alice", "id": "deep", "body": None})
    return head[:-1] + b"\x91" * depth + inner


def mutants(frame: bytes, count: int, seed: int, max_depth: int = 400) -> Iterator[bytes]:
    """``count`` broken variants of ``frame`` (seeded, so a failure can be replayed)."""
    rng = random.Random(seed)
    values = [b"\xc1", b"\xc0", b"\xff", b"\x7f", b"\xcb" + b"\xff" * 8, b"\xd9\x01x"]
    for _ in range(count):
        data = bytearray(frame)
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(7)
            at = rng.randrange(len(data)) if data else 0
            if kind == 0 and data:  # flip bits
                data[at] ^= 1 << rng.randrange(8)
            elif kind == 1 and data:  # a reserved or odd byte
                data[at] = rng.choice((0xC1, 0xC0, 0xFF, 0xDE, 0xDC, 0xD4))
            elif kind == 2:  # truncate
                del data[at:]
            elif kind == 3:  # a length near 2^32
                header = rng.choice(_LEN32)
                length = rng.choice((0xFFFFFFFF, 0xFFFFFFFE, 0x7FFFFFFF))
                data[at:at] = bytes([header]) + length.to_bytes(4, "big")
            elif kind == 4:  # a value of another type spliced in
                data[at:at] = rng.choice(values)
            elif kind == 5:  # nesting
                depth = rng.randrange(1, max_depth)
                data[at:at] = rng.choice((b"\x91", b"\x81\xa1k")) * depth
            else:  # a slice repeated
                end = min(len(data), at + rng.randrange(1, 32))
                data[at:at] = data[at:end] * rng.randrange(1, 8)
        yield bytes(data)
