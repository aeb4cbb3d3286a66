"""What an agent recalls beyond its conversation: long-term memory, episodes, memory tools."""

__all__ = ()
