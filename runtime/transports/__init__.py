"""Transports: how envelopes reach a mailbox. One module per backend, one interface."""

from actormem.runtime.transports.base import Transport, TransportHost
from actormem.runtime.transports.local import LocalTransport

__all__ = ("LocalTransport", "Transport", "TransportHost")
