"""The Redis streams backend, by the transports' naming: one module per backend.

It is built in :mod:`actormem.runtime.redis`; this module names its transport.
"""

from actormem.runtime.redis.transport import RedisTransport, RedisTransportStats

__all__ = ("RedisTransport", "RedisTransportStats")
