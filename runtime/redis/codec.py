"""Envelopes and replies as msgpack bytes, with typed message bodies.

Message bodies that cross processes are tagged msgspec Structs (``tag=True``)
registered here: the registry builds one tagged-union decoder, so a body decodes
back into its own class and is validated on the way. Plain scalars and lists
(``"hi"``, ``3``, ``[1, 2]``) travel too. No pickle, ever.

A command class may declare ``reply_type: ClassVar[Any]``; the asker then decodes
the reply's value into that type (``list[Message]``, say) instead of plain
msgpack values. An error travels as its type name and text and is rebuilt as
the registered error class of that name (every ``actormem.runtime.errors`` class is
registered; ``actors`` registers its own), else as :class:`HandlerError`.

A message type may declare ``input_error: ClassVar[type[Exception]]``: an ask
whose body is of that type but fails its validation (a field of the wrong type, a
check in ``__post_init__``) is then the caller's mistake, not a broken frame: the
consumer answers it with that error, naming the field (see :meth:`Codec.refusal`).
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Final, Union

import msgspec

from actormem.runtime import errors as _errors
from actormem.runtime._envelope import Envelope, Reply
from actormem.runtime.errors import ActorError, HandlerError, MessageDecodeError, TransportError
from actormem.runtime.wire_types import take_declared

__all__ = (
    "Codec",
    "default_codec",
    "register_error_types",
    "register_message_types",
)

#: Plain body types that need no registration.
_PLAIN: Final[tuple[type, ...]] = (str, int, float, bool, type(None), list)


# msgspec raises DecodeError for most bad frames, but UnicodeDecodeError for invalid
# UTF-8 in a string and RecursionError for nesting past the interpreter's limit: a
# frame must never escape as anything but MessageDecodeError (it would kill the
# consumer instead of going to the dead letters).
_DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


class _WireEnvelope(msgspec.Struct, kw_only=True):
    """:class:`Envelope` as it is read back: the body is decoded in a second step."""

    recipient: str
    body: msgspec.Raw
    id: str = ""
    sender: str | None = None
    reply_to: str | None = None
    correlation: int | None = None
    deadline: float | None = None
    resent: bool = False


#: msgspec's validation message: "Expected `int`, got `str` - at `$.max_tokens`".
_EXPECTED: Final = re.compile(
    r"^Expected `(?P<want>.+?)`, got `(?P<got>.+?)` - at `\$\.?(?P<at>.*)`$"
)

#: msgpack's nil: the value of a reply that carries an error.
_NIL: Final = msgspec.Raw(b"\xc0")


class _WireReply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A reply on a reply stream; ``value`` is decoded with the command's reply type."""

    correlation: int
    value: msgspec.Raw = _NIL
    error_type: str | None = None
    error_text: str = ""
    error_address: str | None = None


def _typed_wire(body: Any) -> type[msgspec.Struct]:
    """:class:`_WireEnvelope` with its body decoded as ``body`` (the registered types)."""
    fields = [
        (f.name, body if f.name == "body" else f.type, f.default)
        for f in msgspec.structs.fields(_WireEnvelope)
    ]
    return msgspec.defstruct("_TypedWireEnvelope", fields, kw_only=True)


class _Addressed(msgspec.Struct):
    """The recipient of an envelope, and nothing else of it."""

    recipient: str


class Codec:
    """Encodes envelopes and replies, and decodes them into registered types.

    Args:
        message_types: tagged Struct classes bodies may be.
        error_types: exception classes rebuilt by name on the asking side (every
            ``actormem.runtime.errors`` class is, always).
    """

    def __init__(
        self,
        message_types: tuple[type[msgspec.Struct], ...] = (),
        error_types: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._wire_decoder = msgspec.msgpack.Decoder(_WireEnvelope)
        self._recipient_decoder = msgspec.msgpack.Decoder(_Addressed)
        self._reply_decoder = msgspec.msgpack.Decoder(_WireReply)
        self._types: dict[type[Any], None] = {}
        self._by_tag: dict[tuple[str | None, Any], type[msgspec.Struct]] = {}
        self._body_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder()
        self._typed_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
            _typed_wire(Any)
        )
        self._errors: dict[str, type[BaseException]] = {}
        self._reply_decoders: dict[Any, msgspec.msgpack.Decoder[Any]] = {}
        self.register_message_types(*message_types)
        self.register_error_types(*_runtime_error_types(), *error_types)

    def register_message_types(self, *types: type[msgspec.Struct]) -> None:
        """Let bodies of these tagged Struct classes cross processes.

        Raises:
            TypeError: a type is not a msgspec Struct declared with ``tag=True``,
                or two types share a tag.
        """
        for t in types:
            if not (isinstance(t, type) and issubclass(t, msgspec.Struct)):
                raise TypeError(f"message types are msgspec Structs, got {t!r}")
            if t.__struct_config__.tag is None:
                raise TypeError(
                    f"message type {t.__qualname__} needs tag=True "
                    f"(class {t.__name__}(msgspec.Struct, tag=True))"
                )
        merged = dict(self._types)
        merged.update(dict.fromkeys(types))
        for t in types:
            config = t.__struct_config__
            self._by_tag[(config.tag_field, config.tag)] = t
        body_type = Union[(*merged, *_PLAIN)] if merged else Any
        try:
            decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(body_type)
            typed = msgspec.msgpack.Decoder(_typed_wire(body_type))
        except TypeError as exc:
            raise TypeError(f"cannot register message types: {exc}") from exc
        self._types = merged
        self._body_decoder = decoder
        self._typed_decoder = typed

    def register_error_types(self, *types: type[BaseException]) -> None:
        """Rebuild errors of these classes (by class name) on the asking side."""
        for t in types:
            self._errors[t.__name__] = t

    def message_types(self) -> tuple[type[Any], ...]:
        """The registered message types."""
        return tuple(self._types)

    # -- envelopes --------------------------------------------------------------------

    def check_body(self, body: Any) -> None:
        """Raise :class:`TransportError` if ``body`` could not be decoded on arrival."""
        if isinstance(body, msgspec.Struct):
            if type(body) not in self._types:
                raise TransportError(
                    f"message type {type(body).__qualname__} is not registered for the "
                    "Redis transport (call register_message_types)"
                )
        elif isinstance(body, dict) and self._types:
            raise TransportError(
                "a dict cannot be a message body once message types are registered; "
                "send a registered Struct"
            )

    def encode_envelope(self, envelope: Envelope) -> bytes:
        """Encode ``envelope`` as msgpack.

        Raises:
            TransportError: the body is of an unregistered Struct type or cannot
                be encoded.
        """
        self.check_body(envelope.body)
        try:
            return self._encoder.encode(envelope)
        except (TypeError, msgspec.EncodeError) as exc:
            raise TransportError(
                f"cannot encode {type(envelope.body).__name__} for {envelope.recipient}: {exc}"
            ) from exc

    def decode_envelope(
        self, data: bytes, kind: type[Envelope] = Envelope, **extra: Any
    ) -> Envelope:
        """Decode and validate an envelope.

        Args:
            kind: the class to build (an :class:`Envelope` subclass), with ``extra``
                as its further fields: a consumer decodes straight into its own kind.

        Raises:
            MessageDecodeError: not an envelope, or a body of no registered type.
        """
        try:
            # Envelope and body in one pass; what fails is decoded again in two, so
            # that the error says which part is wrong.
            wire = self._typed_decoder.decode(data)
            body = wire.body
        except _DECODE_ERRORS:
            wire, body = self._decode_parts(data)
        return kind(
            recipient=wire.recipient,
            body=body,
            id=wire.id,
            sender=wire.sender,
            reply_to=wire.reply_to,
            correlation=wire.correlation,
            deadline=wire.deadline,
            resent=wire.resent,
            **extra,
        )

    def _decode_parts(self, data: bytes) -> tuple[_WireEnvelope, Any]:
        """The envelope ``data`` and its body, decoded one after the other.

        Raises:
            MessageDecodeError: not an envelope, or a body of no registered type.
        """
        try:
            wire = self._wire_decoder.decode(data)
        except _DECODE_ERRORS as exc:
            raise MessageDecodeError(f"not a valid envelope: {exc}") from exc
        try:
            body = self._body_decoder.decode(wire.body)
        except _DECODE_ERRORS as exc:
            raise MessageDecodeError(
                f"envelope {wire.id or '?'} for {wire.recipient}: invalid body: {exc}"
            ) from exc
        return wire, body

    def recipient(self, data: bytes) -> str | None:
        """The recipient of the envelope ``data``, without decoding its body; None
        when ``data`` is not an envelope."""
        try:
            return self._recipient_decoder.decode(data).recipient
        except _DECODE_ERRORS:
            return None

    def copy_of(self, data: bytes) -> str | None:
        """The command id of the envelope ``data`` if it is marked as a copy
        (``resent``), without decoding its body; None for anything else."""
        try:
            wire = self._wire_decoder.decode(data)
        except _DECODE_ERRORS:
            return None
        return wire.id if wire.resent else None

    def reply_address(self, data: bytes) -> tuple[str, int, str] | None:
        """``(reply_to, correlation, recipient)`` of an ask whose body is invalid.

        Lets a consumer answer the asker at once instead of leaving it to time out.
        Returns None when ``data`` is not an ask or not even a valid envelope.
        """
        try:
            wire = self._wire_decoder.decode(data)
        except _DECODE_ERRORS:
            return None
        if wire.reply_to is None or wire.correlation is None:
            return None
        return wire.reply_to, wire.correlation, wire.recipient

    def refusal(self, data: bytes) -> BaseException | None:
        """The error to answer an ask with whose body failed validation, if its type
        declares one (``input_error``); None for anything else.

        The error names the type and the field that was wrong, as msgspec found it.
        """
        try:
            wire = self._wire_decoder.decode(data)
            head = _ANY_DECODER.decode(wire.body)
        except _DECODE_ERRORS:
            return None
        if not isinstance(head, dict):
            return None
        for (field, tag), cls in self._by_tag.items():
            if field is None or head.get(field) != tag:
                continue
            error = getattr(cls, "input_error", None)
            if not (isinstance(error, type) and issubclass(error, Exception)):
                return None
            try:
                msgspec.msgpack.decode(wire.body, type=cls)
            except msgspec.ValidationError as exc:
                return error(f"{cls.__name__}: {_reason(str(exc))}")
            except _DECODE_ERRORS:
                return None
            return None
        return None

    # -- replies --------------------------------------------------------------------------

    def encode_reply(self, reply: Reply) -> bytes:
        """Encode a reply; an unencodable value becomes an error reply."""
        if reply.error is not None:
            return self._encode_error(reply.correlation, reply.error)
        try:
            value = msgspec.Raw(self._encoder.encode(reply.value))
        except (TypeError, msgspec.EncodeError) as exc:
            error = TransportError(
                f"the reply ({type(reply.value).__name__}) cannot be encoded: {exc}"
            )
            return self._encode_error(reply.correlation, error)
        return self._encoder.encode(_WireReply(correlation=reply.correlation, value=value))

    def _encode_error(self, correlation: int, error: BaseException) -> bytes:
        text = str(error)
        address = getattr(error, "address", None)
        return self._encoder.encode(
            _WireReply(
                correlation=correlation,
                error_type=type(error).__name__,
                error_text=text,
                error_address=address if isinstance(address, str) else None,
            )
        )

    def reply_correlation(self, data: bytes) -> int:
        """The correlation number of an encoded reply, its value left undecoded (the
        asker's reply type, found by it, decodes the value once).

        Raises:
            MessageDecodeError: not a reply.
        """
        try:
            return self._reply_decoder.decode(data).correlation
        except _DECODE_ERRORS as exc:
            raise MessageDecodeError(f"not a valid reply: {exc}") from exc

    def decode_reply(self, data: bytes, reply_type: Any = Any, address: str = "?") -> Reply:
        """Decode a reply, its value into ``reply_type`` and its error into a class.

        Args:
            data: the encoded reply.
            reply_type: the type of the value (the command's ``reply_type``).
            address: the actor asked, named by errors that carry no address.

        Raises:
            MessageDecodeError: not a reply, or a value not of ``reply_type``.
        """
        try:
            wire = self._reply_decoder.decode(data)
        except _DECODE_ERRORS as exc:
            raise MessageDecodeError(f"not a valid reply: {exc}") from exc
        if wire.error_type is not None:
            return Reply(wire.correlation, error=self._rebuild_error(wire, address))
        decoder = self._reply_decoders.get(reply_type)
        if decoder is None:
            decoder = self._reply_decoders[reply_type] = msgspec.msgpack.Decoder(reply_type)
        try:
            return Reply(wire.correlation, decoder.decode(wire.value))
        except _DECODE_ERRORS as exc:
            error = MessageDecodeError(f"the reply is not a valid {reply_type!r}: {exc}")
            return Reply(wire.correlation, error=error)

    def _rebuild_error(self, wire: _WireReply, asked: str) -> BaseException:
        name = wire.error_type or "Exception"
        text = wire.error_text
        cls = self._errors.get(name)
        address = wire.error_address or asked
        if cls is not None:
            if issubclass(cls, ActorError):
                # The text already reads "actor <address>: ..."; keep it as it was.
                err = cls.__new__(cls)
                Exception.__init__(err, text)
                err.address = address
                return err
            try:
                return cls(text)
            except Exception:  # a constructor with other arguments: fall through
                pass
        prefix = f"actor {address}: "
        detail = text[len(prefix) :] if text.startswith(prefix) else text
        return HandlerError(address, f"{name}: {detail}")


_ANY_DECODER: Final = msgspec.msgpack.Decoder()


def _reason(text: str) -> str:
    """msgspec's validation message in the words of the field: "max_tokens must be
    int, got str"."""
    found = _EXPECTED.match(text)
    if found is None:
        return text
    at = found["at"] or "the message"
    return f"{at} must be {found['want']}, got {found['got']}"


def _runtime_error_types() -> tuple[type[BaseException], ...]:
    return tuple(
        cls
        for _, cls in inspect.getmembers(_errors, inspect.isclass)
        if issubclass(cls, _errors.ActormemError)
    )


#: The codec transports use unless given another; it knows every declared type.
default_codec: Final = Codec()
take_declared(default_codec)


def register_message_types(*types: type[msgspec.Struct]) -> None:
    """Register tagged Struct message types with the default codec (see :class:`Codec`)."""
    default_codec.register_message_types(*types)


def register_error_types(*types: type[BaseException]) -> None:
    """Register error classes with the default codec, to be rebuilt by name."""
    default_codec.register_error_types(*types)
