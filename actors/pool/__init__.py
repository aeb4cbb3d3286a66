"""The insight pool actor: shared insights, subscriptions and delivery cursors."""

__all__ = ()
