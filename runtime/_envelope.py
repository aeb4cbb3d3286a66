"""Commands, the envelope every message travels in (internal), and the reply to an ask.

An envelope carries a typed message (a ``msgspec.Struct``) to an address. It is a
msgspec Struct itself, so the Redis transport encodes it as msgpack, while the
local transport hands the same object over without encoding.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin

import msgspec

__all__ = ("Command", "Envelope", "Reply")

R = TypeVar("R")


class Command(msgspec.Struct, Generic[R], frozen=True, tag=True):
    """Base of a message that is asked, typed by its reply.

    A command declares the type of its reply as its type argument, and ``ask``
    returns that type::

        class Context(Command[list[Message]], frozen=True):
            max_tokens: int | None = None

        messages = await runtime.ask("memory/alice", Context())  # list[Message]

    Commands are frozen and tagged with their class name (one decoder reads any
    command of a union off a stream); the type argument changes nothing on the wire.

    Class attributes:
        reply_type: the type argument, read when the class is made, so a transport
            that carries replies across processes knows what to decode them into.
    """

    reply_type: ClassVar[Any] = Any
    #: Over Redis an ask with no reply is sent again as a copy that is only ever
    #: answered from the reply kept with the command's effect. True sends it again as
    #: a new command instead (a new id, handled again): for a command that is
    #: idempotent by a key of its own and whose reply comes from elsewhere (one
    #: forwarded on, whose first recipient keeps no reply).
    resend_as_new: ClassVar[bool] = False
    #: Over Redis the reply to an applied ask is kept with its effect (at most
    #: ``reply_ttl_ms``) to answer a copy of the ask. False keeps none: for a
    #: command whose reply quotes text an erasure must reach at once, and whose
    #: unanswered asks are sent again as new commands (``resend_as_new``, by it or by
    #: the command that forwarded it), so that no copy ever needs the kept reply.
    keep_reply: ClassVar[bool] = True
    #: True lets a transport that stores effects (Redis) handle a run of such
    #: commands to one actor, consecutive in its mailbox, as a batch: each handled
    #: in turn and answered on its own, their effects stored as one change set. A
    #: command of a batch may be handled again (when a later one of the batch
    #: crashes): True only for a command whose handler has no effect outside its
    #: actor's state but the tells it sends (whose ids are the same each time).
    batch: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Command):
                (reply,) = get_args(base)
                if not isinstance(reply, TypeVar):
                    cls.reply_type = reply


class Envelope(msgspec.Struct, kw_only=True):
    """A message on its way to one actor.

    Attributes:
        recipient: the actor's address, ``"kind/key"``.
        body: the message itself.
        id: unique per command (exactly-once effects key on it).
        sender: the sending actor's address, if an actor sent it.
        reply_to: where the reply goes (a client's reply inbox), for asks.
        correlation: matches the reply to the waiting ask.
        deadline: wall-clock time after which nobody waits for the reply any more.
        resent: a copy of an ask sent again because no reply came: it is only ever
            answered with the reply kept with its command's effect, never handled
            (the first copy, ahead of it, is).
    """

    recipient: str
    body: Any
    id: str = ""
    sender: str | None = None
    reply_to: str | None = None
    correlation: int | None = None
    deadline: float | None = None
    resent: bool = False

    #: True on envelopes whose transport wants to hear when handling starts
    #: (``Transport.starting``): a Redis entry delivered again after its worker died.
    track_start: ClassVar[bool] = False


class Reply:
    """The answer to an ask: a value, or the error the handler raised.

    In process ``error`` is the exception object itself; a transport that crosses
    processes sends the error's type name and text and rebuilds an error from them.
    """

    __slots__ = ("correlation", "error", "value")

    def __init__(
        self, correlation: int, value: Any = None, error: BaseException | None = None
    ) -> None:
        self.correlation = correlation
        self.value = value
        self.error = error
