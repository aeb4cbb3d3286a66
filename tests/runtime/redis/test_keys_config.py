"""Key names, shard mapping and the [redis] config section."""

from __future__ import annotations

import re
import zlib

import pytest

from actormem.runtime.config import decode_config
from actormem.runtime.errors import ConfigError
from actormem.runtime.redis import Keys, RedisConfig, shard_of


def _tag(key: str) -> str:
    match = re.search(r"\{([^}]*)\}", key)
    assert match, key
    return match.group(1)


def test_a_shards_stream_lease_and_agent_state_share_one_hash_tag() -> None:
    keys = Keys("am")
    tags = {
        _tag(k)
        for k in (
            keys.stream(17),
            keys.lease(17),
            keys.fence(17),
            keys.actor_log(17, "memory/alice"),
            keys.actor_snapshot(17, "memory/alice"),
            keys.actor_applied(17, "memory/alice"),
        )
    }
    assert tags == {"s17"}
    assert keys.stream(17) == "am:{s17}:stream"
    assert keys.actor_state(17, "memory/alice") == (
        keys.actor_log(17, "memory/alice"),
        keys.actor_snapshot(17, "memory/alice"),
        keys.actor_applied(17, "memory/alice"),
    )


def test_the_state_keys_of_several_actors_are_each_actor_s_in_turn() -> None:
    keys = Keys("am")
    addresses = ["memory/alice", "memory/bob", "pool/main"]
    expected = [name for a in addresses for name in keys.actor_state(17, a)]
    assert keys.actor_states(17, addresses) == expected
    assert keys.actor_states(17, []) == []


def test_every_key_starts_with_the_prefix() -> None:
    keys = Keys("proj")
    for key in (keys.stream(0), keys.broadcast(), keys.dead_letters(), keys.replies("c")):
        assert key.startswith("proj:")


def test_a_prefix_with_braces_is_refused() -> None:
    with pytest.raises(ValueError, match="no braces"):
        Keys("a{b}")


def test_shard_of_is_stable_and_in_range() -> None:
    # CRC-32, not Python's per-process salted hash: every process agrees.
    assert shard_of("memory/alice", 16) == zlib.crc32(b"memory/alice") % 16
    assert {shard_of(f"memory/a{i}", 8) for i in range(200)} == set(range(8))


def test_config_repr_hides_a_password_in_the_url() -> None:
    config = RedisConfig(url="redis://user:s3cret@example:6379/0")
    assert "s3cret" not in repr(config)
    assert "user:***@example" in repr(config)


def test_password_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_REDIS_PW", "pw")
    config = RedisConfig(password_env="MY_REDIS_PW")
    assert config.password() == "pw"
    assert "pw'" not in repr(config).replace("MY_REDIS_PW", "")


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match="unknown key 'shardz'"):
        decode_config("shardz = 3", RedisConfig, source="x.toml")
    with pytest.raises(ConfigError, match="shards must be >= 1"):
        decode_config("shards = 0", RedisConfig, source="x.toml")
