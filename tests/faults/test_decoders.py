"""Bad input against every decoder: only the documented errors, and bounded memory.

The decoders: envelopes, replies and the reply address of a bad ask
(``actormem.runtime.redis.codec``), stored messages (``actormem.actors.messages``) and config
(``actormem.runtime.config.decode_config``). Their documented errors:
``MessageDecodeError`` for frames, ``MemoryInputError`` for messages,
``ConfigError`` for config; ``reply_address`` never raises.

Two kinds of bad frame used to escape as other errors (msgspec raises
UnicodeDecodeError for invalid UTF-8 in a string and RecursionError for nesting
past the interpreter's limit): the decoders now turn them into their documented
errors, and the mutation loop tolerates no undocumented error at all.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actormem.actors.config import AppConfig
from actormem.actors.errors import MemoryInputError
from actormem.actors.messages import decode_message, decode_messages
from actormem.runtime.config import decode_config
from actormem.runtime.errors import ConfigError, MessageDecodeError
from actormem.runtime.redis import default_codec
from tests.faults.frames import deep, huge_lengths, mutants, real_frames
from tests.faults.report import full_size

pytestmark = pytest.mark.faults

#: Errors that escape the decoders today although they are not documented (defects).
KNOWN_DEFECTS: tuple[type[BaseException], ...] = ()  # none left

#: Each decoder, and the one error type it documents (None: never raises).
DECODERS: dict[str, tuple[Callable[[bytes], Any], type[BaseException] | None]] = {
    "envelope": (default_codec.decode_envelope, MessageDecodeError),
    "reply": (default_codec.decode_reply, MessageDecodeError),
    "reply_address": (default_codec.reply_address, None),
    "message": (decode_message, MemoryInputError),
    "messages": (decode_messages, MemoryInputError),
}

#: make faults fuzzes ten times longer than make test.
SCALE = 10 if full_size() else 1

FUZZ = settings(
    max_examples=300 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: For strategies whose examples are slow to make.
FAST_FUZZ = settings(FUZZ, max_examples=100 * SCALE)


def outcome(decoder: str, data: bytes) -> str:
    """``ok``, ``documented``, or the name of an undocumented error's type."""
    decode, documented = DECODERS[decoder]
    try:
        decode(data)
    except Exception as exc:
        if documented is not None and isinstance(exc, documented):
            return "documented"
        return type(exc).__name__
    return "ok"


def undocumented(data: bytes, tolerate: tuple[type[BaseException], ...] = ()) -> list[str]:
    """The decoders that raise an undocumented error on ``data`` (bar ``tolerate``)."""
    tolerated = {t.__name__ for t in tolerate}
    found = []
    for name in DECODERS:
        result = outcome(name, data)
        if result not in ("ok", "documented") and result not in tolerated:
            found.append(f"{name}: {result} on {data[:40]!r}")
    return found


def test_real_frames_decode_and_each_decoder_rejects_the_others_cleanly() -> None:
    frames = real_frames()
    assert default_codec.decode_envelope(frames["envelope.add"]).id == "cmd-add"
    assert default_codec.decode_reply(frames["reply.value"]).correlation == 7
    assert decode_message(frames["message"]).tool_call_id == "c1"
    for data in frames.values():
        assert undocumented(data) == []


def test_mutated_real_frames_raise_only_documented_errors() -> None:
    failures: list[str] = []
    rejected = 0
    for n, (_, frame) in enumerate(sorted(real_frames().items())):
        for data in mutants(frame, 150 * SCALE, seed=n):
            failures.extend(undocumented(data, tolerate=KNOWN_DEFECTS))
            rejected += outcome("envelope", data) != "ok"
    assert failures == []
    assert rejected > 1000  # the mutants do break frames


def test_lengths_near_4_gib_are_rejected_without_allocating_them() -> None:
    variants = [v for frame in real_frames().values() for v in huge_lengths(frame)]
    assert len(variants) > 100
    for data in variants:
        tracemalloc.start()
        try:
            assert undocumented(data) == []
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # Bounded by the input, not by the length it announces (4 GiB).
        assert peak < 256 * 1024 + 64 * len(data), (peak, data[:40])


def test_decoding_any_mutant_stays_within_memory_bounded_by_its_size() -> None:
    frame = real_frames()["envelope.add"]
    for data in mutants(frame, 60, seed=99, max_depth=100):
        tracemalloc.start()
        try:
            for name in DECODERS:
                outcome(name, data)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 256 * 1024 + 64 * len(data), (peak, data[:40])


@FUZZ
@given(st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_documented_errors(data: bytes) -> None:
    assert undocumented(data, tolerate=KNOWN_DEFECTS) == []


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_fields = st.sampled_from(
    ["recipient", "body", "id", "sender", "reply_to", "correlation", "deadline", "type"]
)


@FAST_FUZZ
@given(st.dictionaries(_fields | st.text(max_size=8), _values, max_size=8))
def test_envelope_shaped_maps_of_wrong_types_raise_only_documented_errors(
    fields: dict[str, Any],
) -> None:
    assert undocumented(msgspec.msgpack.encode(fields)) == []


@FUZZ
@given(
    st.fixed_dictionaries(
        {"recipient": st.just("memory/a"), "id": st.text(max_size=8)},
        optional={"body": _values | st.fixed_dictionaries({"type": st.text(max_size=12)})},
    )
)
def test_bodies_of_no_registered_type_are_rejected(fields: dict[str, Any]) -> None:
    data = msgspec.msgpack.encode(fields)
    result = outcome("envelope", data)
    assert result in ("ok", "documented")
    if result == "ok":
        body = default_codec.decode_envelope(data).body
        # Only plain values or registered commands come out, never a raw dict.
        assert not isinstance(body, dict)


def test_invalid_utf8_is_a_decode_error() -> None:
    data = msgspec.msgpack.encode({"recipient": "memory/a", "body": None})
    with pytest.raises(MessageDecodeError):
        default_codec.decode_envelope(data.replace(b"memory/a", b"memory/\xff"))


def test_deep_nesting_is_a_decode_error() -> None:
    with pytest.raises(MessageDecodeError):
        default_codec.decode_envelope(deep(5_000))


# -- config --------------------------------------------------------------------------


_toml_keys = st.sampled_from(
    ["runtime", "redis", "memory", "compression", "pool", "simulation", "logging", "bogus"]
)
_toml_values = st.sampled_from(
    ["1", "-1", "0", '"x"', "true", "1.5", "[]", "{}", '"redis"', "99999999999999999999999", "nan"]
)
_toml_fields = st.sampled_from(
    ["transport", "mailbox_size", "shards", "url", "agents", "steps", "level", "strategy", "x"]
)


@FUZZ
@given(st.lists(st.tuples(_toml_keys, _toml_fields, _toml_values), max_size=6))
def test_config_with_wrong_keys_types_and_values_is_one_config_error(
    entries: list[tuple[str, str, str]],
) -> None:
    text = "".join(f"[{section}]\n{key} = {value}\n" for section, key, value in entries)
    try:
        decode_config(text, AppConfig, source="fuzz.toml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.toml: ")
        assert "\n" not in str(exc)


@FUZZ
@given(st.text(max_size=200))
def test_any_text_as_config_is_a_config_or_nothing(text: str) -> None:
    try:
        decode_config(text, AppConfig, source="fuzz.toml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.toml: ")


@FAST_FUZZ
@given(st.dictionaries(_toml_keys, _values, max_size=4))
def test_config_mappings_built_in_code_are_checked_too(data: dict[str, Any]) -> None:
    try:
        decode_config(data, AppConfig, source="overrides")
    except ConfigError as exc:
        assert str(exc).startswith("overrides")
