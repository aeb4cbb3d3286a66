"""Secrets stay out of every repr, str and printed config: one helper hides them."""

from __future__ import annotations

import pytest
from rich.pretty import pretty_repr

from actormem.actors import AppConfig, PoolConfig
from actormem.actors.compression import CompressionConfig
from actormem.actors.compression.config import LLMConfig
from actormem.actors.compression.llm import LLMSummarizer
from actormem.actors.recall.embeddings import OpenAIEmbedder
from actormem.runtime.config import REDACTED, redact_url, redacted
from actormem.runtime.redis import RedisConfig, connect
from actormem.runtime.tokens import get_counter

SECRET = "s3cret-Pa55word"
KEY = "k" * 24


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://:{SECRET}@host:6379/0", "redis://:***@host:6379/0"),
        (f"redis://user:{SECRET}@host/1", "redis://user:***@host/1"),
        # A password may hold "@", "/" (escaped) or ":": the user info ends at the last "@".
        ("redis://user:p@ss:w%2Frd@host/0?x=1", "redis://user:***@host/0?x=1"),
        (f"rediss://host:6380?password={SECRET}&db=2", "rediss://host:6380?password=***&db=2"),
        (f"unix://:{SECRET}@/tmp/redis.sock?db=0", "unix://:***@/tmp/redis.sock?db=0"),
        (f"http://user:{SECRET}@llm.local/v1", "http://user:***@llm.local/v1"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://user@host", "redis://user@host"),
        ("unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
        ("not a url", "not a url"),
    ],
)
def test_redact_url_hides_the_password_and_keeps_the_rest(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def _configs() -> list[object]:
    redis = RedisConfig(url=f"redis://user:{SECRET}@example:6379/0")
    pool = PoolConfig(hmac_key=KEY)
    llm = LLMConfig(base_url=f"http://user:{SECRET}@llm.local/v1")
    app = AppConfig(redis=redis, pool=pool, compression=CompressionConfig(llm=llm))
    return [redis, pool, llm, app]


@pytest.mark.parametrize("config", _configs(), ids=lambda c: type(c).__name__)
def test_no_repr_or_str_of_a_config_shows_a_secret(config: object) -> None:
    for text in (repr(config), str(config), f"{config}", str([config]), pretty_repr(config)):
        assert SECRET not in text and KEY not in text
        assert REDACTED in text
    assert repr(config).startswith(type(config).__name__ + "(")


def test_a_repr_still_shows_everything_else() -> None:
    text = repr(AppConfig(redis=RedisConfig(url=f"redis://u:{SECRET}@h:1", prefix="proj")))
    assert "url='redis://u:***@h:1'" in text and "prefix='proj'" in text
    assert "hmac_key=''" in text  # an unset secret is shown as unset
    assert "PoolConfig(max_insight_chars=" in text


def test_redacted_config_data_hides_secrets_and_keeps_the_rest() -> None:
    app = _configs()[-1]
    assert isinstance(app, AppConfig)
    data = redacted(app)
    assert data["redis"]["url"] == "redis://user:***@example:6379/0"
    assert data["pool"]["hmac_key"] == REDACTED
    assert data["compression"]["llm"]["base_url"] == "http://user:***@llm.local/v1"
    assert data["memory"]["max_tokens"] == app.memory.max_tokens
    assert SECRET not in str(data) and KEY not in str(data)
    # The config itself keeps its secrets: only what is shown is redacted.
    assert app.pool.hmac_key == KEY


@pytest.mark.anyio
async def test_clients_of_the_llm_and_embeddings_hide_the_password() -> None:
    llm = LLMConfig(base_url=f"http://user:{SECRET}@llm.local/v1")
    summarizer = LLMSummarizer(llm, get_counter())
    embedder = OpenAIEmbedder(f"http://user:{SECRET}@llm.local/v1", "m", api_key="x")
    try:
        for text in (repr(summarizer), repr(embedder)):
            assert SECRET not in text and "user:***@llm.local" in text
    finally:
        await summarizer.aclose()


def test_a_connection_error_names_the_url_without_its_password() -> None:
    config = RedisConfig(url=f"redis://:{SECRET}@h:1", tls=True)
    with pytest.raises(ValueError, match=r"unix://:\*\*\*@/tmp/r.sock") as caught:
        connect(config, f"unix://:{SECRET}@/tmp/r.sock")
    assert SECRET not in str(caught.value)
