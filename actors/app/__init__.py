"""The application: wiring (MemoryRuntime), the command line, and the simulation."""

__all__ = ()
