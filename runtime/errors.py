"""The one error tree of actormem.

Every error the runtime or its actors raise on purpose derives from
:class:`ActormemError`, so embedding code can catch the whole family with one
``except``. Lower-level errors (redis, msgspec, openai, OS) are translated at the
boundary with ``raise ... from exc`` so the cause stays visible.

::

    ActormemError
    ├── ConfigError                  bad TOML, unknown key, wrong type, bad value
    ├── RuntimeClosedError           the runtime is not open, or is shutting down
    ├── ActorError                   something about one actor (carries ``address``)
    │   ├── InvalidAddressError      not a ``kind/key`` address (also a ValueError)
    │   ├── ActorNotFoundError       no actor kind registered for the address
    │   ├── ActorStoppedError        the actor stopped (restart intensity, shutdown)
    │   ├── MailboxFullError         ``tell_nowait`` on a full mailbox
    │   ├── AskTimeoutError          no reply within the ask timeout
    │   │   └── NoOwnerError         no worker owns the actor's shard (Redis)
    │   ├── TooManyAsksError         ``max_pending_asks`` asks already wait (not sent)
    │   └── HandlerError             the handler raised while serving this request
    ├── TransportError               a transport cannot carry an envelope
    │   ├── MessageTooLargeError     an encoded envelope is over the size limit
    │   ├── TransportUnavailableError  the broker (Redis) is unreachable or refuses
    │   └── MessageDecodeError       bytes that are not a valid envelope or reply
    └── (actors) MemoryInputError    bad input to an agent memory (actormem.actors.errors)

``actors`` defines its domain errors as subclasses of :class:`ActormemError` too.
"""

from __future__ import annotations

__all__ = (
    "ActorError",
    "ActorNotFoundError",
    "ActorStoppedError",
    "ActormemError",
    "AskTimeoutError",
    "ConfigError",
    "HandlerError",
    "InvalidAddressError",
    "MailboxFullError",
    "MessageDecodeError",
    "MessageTooLargeError",
    "NoOwnerError",
    "RuntimeClosedError",
    "TooManyAsksError",
    "TransportError",
    "TransportUnavailableError",
    "first_error",
)


class ActormemError(Exception):
    """Base class of every error actormem raises on purpose."""


class ConfigError(ActormemError):
    """A configuration file or value is invalid.

    The message names the file (when there is one), the key and what was expected.
    """


class RuntimeClosedError(ActormemError):
    """The runtime is not open, or is shutting down and takes no new work."""


class ActorError(ActormemError):
    """An error about one actor; ``address`` names it."""

    def __init__(self, address: str, message: str) -> None:
        super().__init__(f"actor {address}: {message}")
        self.address = address


class InvalidAddressError(ActorError, ValueError):
    """An actor address is not ``kind/key`` (a non-empty kind without ``/``, a
    non-empty key, printable, at most ``MAX_ADDRESS_CHARS`` characters).

    Raised where a message is sent, before anything is queued; a worker that reads
    such an address from a stream dead-letters the entry with this text.
    """

    def __init__(self, address: object, problem: str) -> None:
        shown = repr(address) if isinstance(address, str) else f"of type {type(address).__name__}"
        if len(shown) > 80:
            shown = shown[:80] + "..."
        Exception.__init__(
            self,
            f"invalid actor address {shown}: {problem}; an address is 'kind/key' "
            "with a non-empty kind and key, like 'memory/alice'",
        )
        self.address = address if isinstance(address, str) else repr(address)


class ActorNotFoundError(ActorError):
    """No actor kind is registered for the address."""


class ActorStoppedError(ActorError):
    """The actor has stopped and takes no more messages; pending asks fail with this."""


class MailboxFullError(ActorError):
    """``tell_nowait`` found the actor's bounded mailbox full (nothing was enqueued)."""


class AskTimeoutError(ActorError, TimeoutError):
    """No reply arrived within the ask timeout."""


class NoOwnerError(AskTimeoutError):
    """No worker owns the shard of the actor asked (Redis): the ask fails early.

    The command stays in the shard's stream; a worker that takes the shard later
    handles it, as it would an ask that timed out.
    """


class TooManyAsksError(ActorError):
    """``runtime.max_pending_asks`` asks already wait for replies: this one was not sent."""


class HandlerError(ActorError):
    """The actor's handler raised while serving this request.

    The original exception is chained as ``__cause__`` and its type and text are
    in the message, so the caller learns why without reading the logs.
    """


class TransportError(ActormemError):
    """A transport cannot carry an envelope (connection lost, bad frame, ...)."""


class MessageTooLargeError(TransportError):
    """An encoded envelope is larger than the configured maximum message size."""


class TransportUnavailableError(TransportError):
    """The broker (Redis) cannot be reached, or refuses the connection or command."""


class MessageDecodeError(TransportError):
    """Bytes read from the broker are not a valid envelope or reply (or are too large)."""


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error of tasks that failed together, looking inside nested groups."""
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first
