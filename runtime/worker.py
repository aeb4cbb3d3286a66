"""Worker processes of the Redis transport, by their short path.

They live in :mod:`actormem.runtime.redis.worker` (``python -m
actormem.runtime.redis.worker`` runs one); this module names its public API.
"""

from actormem.runtime.redis.worker import WorkerProcesses, load_register, run_worker

__all__ = ("WorkerProcesses", "load_register", "run_worker")
