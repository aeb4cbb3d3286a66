"""The insight pool actor: shared insights, subscriptions, and agent vouchers."""
