"""The compression config: AutoContext's defaults, validation, and the API key kept out."""

from __future__ import annotations

import pytest

from actormem.actors.compression import CompressionConfig, LLMConfig
from actormem.runtime.config import decode_config
from actormem.runtime.errors import ConfigError


def test_defaults_are_autocontext_defaults() -> None:
    c = CompressionConfig()
    assert (c.msg_threshold, c.max_tokens, c.token_ratio, c.last_keep) == (100, 131072, 0.75, 50)
    assert (c.min_consecutive_tool_messages, c.large_payload_threshold) == (6, 5120)
    assert c.offload_preview == 200 and c.summarizer == "offline" and c.enabled
    assert "create_plan" in c.plan_note_tools and c.concurrency == 2
    assert c.token_limit == 98304


def test_over_budget_is_either_threshold_exceeded() -> None:
    c = CompressionConfig(msg_threshold=10, max_tokens=1000, token_ratio=0.5)
    assert not c.over_budget(10, 500)
    assert c.over_budget(11, 0) and c.over_budget(1, 501)


def test_a_toml_section_decodes_and_unknown_keys_are_named() -> None:
    toml = (
        'msg_threshold = 30\nsummarizer = "openai"\n[llm]\nmodel = "m"\nbase_url = "http://x/v1"\n'
    )
    c = decode_config(toml, CompressionConfig, source="c.toml")
    assert c.msg_threshold == 30 and c.llm.model == "m" and c.llm.base_url == "http://x/v1"
    with pytest.raises(ConfigError, match=r"unknown key 'llm\.api_key'"):
        decode_config('[llm]\napi_key = "sk-secret"\n', CompressionConfig, source="c.toml")


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"token_ratio": 0}, "token_ratio"),
        ({"msg_threshold": 0}, "msg_threshold"),
        ({"concurrency": -1}, "concurrency"),
        ({"offload_preview": 6000}, "offload_preview"),
        ({"summary_min_tokens": 600}, "summary_min_tokens"),
        ({"llm": {"timeout": 0}}, "key 'llm': timeout must be > 0"),
        ({"summarizer": "magic"}, "summarizer"),
    ],
)
def test_bad_values_are_config_errors(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        decode_config(fields, CompressionConfig, source="c.toml")


def test_the_api_key_comes_from_the_environment_and_is_never_in_the_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "sk-very-secret")
    llm = LLMConfig(api_key_env="MY_LLM_KEY")
    assert llm.api_key() == "sk-very-secret"
    assert "sk-very-secret" not in repr(llm) and "sk-very-secret" not in repr(
        CompressionConfig(llm=llm)
    )
    monkeypatch.delenv("MY_LLM_KEY")
    assert llm.api_key() is None
