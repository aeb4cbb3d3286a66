"""Wiring: a runtime with the domain actors registered, and typed handles on them."""

from __future__ import annotations

from actors.compression import COMPRESSOR_KIND, compressor_factory
from actors.config import AppConfig
from actors.handle import MemoryHandle
from actors.memory import memory_factory
from actors.pool import PoolActor
from runtime import Runtime, Transport

__all__ = ("MemoryRuntime", "register_actors")


def register_actors(runtime: Runtime, config: AppConfig) -> None:
    """Register every domain actor kind on ``runtime`` (workers call this too)."""
    runtime.register("memory", memory_factory(config))
    runtime.register(COMPRESSOR_KIND, compressor_factory(config.compression))
    store = config.retention.store() if config.retention.policy == "persistent" else None
    runtime.register("pool", PoolActor.factory(config.pool, store))


class MemoryRuntime(Runtime):
    """A :class:`runtime.Runtime` with the agent memory actors registered.

    Args:
        config: the whole app config (defaults if omitted).
        transport: how envelopes travel (in-process by default).

    Example::

        async with MemoryRuntime() as rt:
            alice = rt.memory("alice")
            await alice.add({"role": "user", "content": "hi"})
    """

    def __init__(self, config: AppConfig | None = None, *, transport: Transport | None = None):
        self.app_config = config or AppConfig()
        super().__init__(self.app_config.runtime, transport=transport)
        register_actors(self, self.app_config)

    def memory(self, agent: str, *, timeout: float | None = None) -> MemoryHandle:
        """Return the handle on ``agent``'s memory (its actor starts on first use)."""
        return MemoryHandle(self, agent, timeout)
