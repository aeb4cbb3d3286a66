"""Load tests and side-by-side baselines: ``actormem bench NAME`` runs one."""

__all__ = ()
