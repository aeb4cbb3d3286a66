"""actormem's actor machinery: runtime, actors, transports, config, tokens, errors.

``runtime`` knows nothing of memory semantics; the domain actors live in ``actors``.
"""

from actormem.runtime._actor import Actor, ActorContext, ActorRef, Forward, split_address
from actormem.runtime._envelope import Command, Envelope, Reply
from actormem.runtime._runtime import ActorFactory, Runtime, RuntimeStats
from actormem.runtime.config import LoggingConfig, RuntimeConfig, SupervisionConfig, load_toml
from actormem.runtime.errors import (
    ActorError,
    ActormemError,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    ConfigError,
    HandlerError,
    InvalidAddressError,
    MailboxFullError,
    MessageDecodeError,
    MessageTooLargeError,
    NoOwnerError,
    RuntimeClosedError,
    TooManyAsksError,
    TransportError,
    TransportUnavailableError,
)
from actormem.runtime.ids import new_id
from actormem.runtime.state import Durable, DurableChanges, SnapshotState, is_durable
from actormem.runtime.tokens import TokenCounter, get_counter
from actormem.runtime.transports import LocalTransport, Transport, TransportHost

__all__ = (
    "Actor",
    "ActorContext",
    "ActorError",
    "ActorFactory",
    "ActorNotFoundError",
    "ActorRef",
    "ActorStoppedError",
    "ActormemError",
    "AskTimeoutError",
    "Command",
    "ConfigError",
    "Durable",
    "DurableChanges",
    "Envelope",
    "Forward",
    "HandlerError",
    "InvalidAddressError",
    "LocalTransport",
    "LoggingConfig",
    "MailboxFullError",
    "MessageDecodeError",
    "MessageTooLargeError",
    "NoOwnerError",
    "Reply",
    "Runtime",
    "RuntimeClosedError",
    "RuntimeConfig",
    "RuntimeStats",
    "SnapshotState",
    "SupervisionConfig",
    "TokenCounter",
    "TooManyAsksError",
    "Transport",
    "TransportError",
    "TransportHost",
    "TransportUnavailableError",
    "get_counter",
    "is_durable",
    "load_toml",
    "new_id",
    "split_address",
)
