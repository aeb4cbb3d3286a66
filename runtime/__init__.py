"""actormem's actor machinery: runtime, actors, transports, config, tokens, errors.

``runtime`` knows nothing of memory semantics; the domain actors live in ``actors``.
"""

from runtime._actor import Actor, ActorContext, ActorRef, split_address
from runtime._envelope import Envelope, Reply
from runtime._runtime import ActorFactory, Runtime, RuntimeStats
from runtime.config import LoggingConfig, RuntimeConfig, SupervisionConfig, load_toml
from runtime.errors import (
    ActorError,
    ActormemError,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    ConfigError,
    HandlerError,
    MailboxFullError,
    MessageTooLargeError,
    RuntimeClosedError,
    TooManyAsksError,
    TransportError,
)
from runtime.ids import new_id
from runtime.tokens import TokenCounter, get_counter
from runtime.transports import InProcessTransport, Transport, TransportHost

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
    "ConfigError",
    "Envelope",
    "HandlerError",
    "InProcessTransport",
    "LoggingConfig",
    "MailboxFullError",
    "MessageTooLargeError",
    "Reply",
    "Runtime",
    "RuntimeClosedError",
    "RuntimeConfig",
    "RuntimeStats",
    "SupervisionConfig",
    "TokenCounter",
    "TooManyAsksError",
    "Transport",
    "TransportError",
    "TransportHost",
    "get_counter",
    "load_toml",
    "new_id",
    "split_address",
)
