"""Redis fixtures for these tests (until tests/conftest.py loads the plugin for all)."""

from tests.redis_fixtures import (
    make_redis_transport,
    redis_client,
    redis_cluster_url,
    redis_config,
    redis_prefix,
    redis_url,
)

__all__ = (
    "make_redis_transport",
    "redis_client",
    "redis_cluster_url",
    "redis_config",
    "redis_prefix",
    "redis_url",
)
