"""Transports: how envelopes reach a mailbox. One module per backend, one interface."""

from runtime.transports.base import Transport, TransportHost
from runtime.transports.memory import InProcessTransport

__all__ = ("InProcessTransport", "Transport", "TransportHost")
