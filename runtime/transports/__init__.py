"""Transports: how envelopes reach a mailbox. One module per backend, one interface."""

from actormem.runtime.transports.base import Transport, TransportHost
from actormem.runtime.transports.memory import InProcessTransport

__all__ = ("InProcessTransport", "Transport", "TransportHost")
