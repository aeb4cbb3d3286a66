"""Transports: how envelopes reach a mailbox, behind one interface.

The in-process transport is here; the Redis streams transport, larger, is its own
package, :mod:`actormem.runtime.redis`.
"""

from actormem.runtime.transports.base import Transport, TransportHost
from actormem.runtime.transports.local import LocalTransport

__all__ = ("LocalTransport", "Transport", "TransportHost")
