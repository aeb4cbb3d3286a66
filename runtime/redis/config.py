"""The ``[redis]`` config section, under the Redis transport's package.

The section is defined in :mod:`actormem.runtime.redis_config`, so that an app
config can hold one without loading this package.
"""

from actormem.runtime import redis_config
from actormem.runtime.redis_config import *  # noqa: F403  (the same names)

__all__ = redis_config.__all__
