"""The agent memory actor: its commands, its state and the typed handle callers use."""

__all__ = ()
