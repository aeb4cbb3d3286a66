"""Offload hints, previews and the context_reload tool's schema and arguments."""

from __future__ import annotations

import json

import pytest

from actormem.actors.compression import (
    CONTEXT_RELOAD_TOOL,
    ReloadArgumentsError,
    format_reloaded,
    offload_hint,
    parse_reload_arguments,
    reload_ids,
    reload_tool_result,
)
from actormem.actors.compression.offload import preview, strip_hints
from actormem.actors.errors import MemoryInputError
from tests.actors.compression._build import tool_unit, user


def test_the_tool_schema_is_an_openai_function_with_one_required_id() -> None:
    json.dumps(CONTEXT_RELOAD_TOOL)  # JSON-able as sent to the API
    fn = CONTEXT_RELOAD_TOOL["function"]
    assert CONTEXT_RELOAD_TOOL["type"] == "function" and fn["name"] == "context_reload"
    assert fn["parameters"]["required"] == ["id"]
    assert fn["parameters"]["properties"]["id"]["type"] == "string"


def test_hints_name_their_id_and_can_be_found_and_stripped() -> None:
    hint = offload_hint("abc123", "offloaded 9000 characters")
    text = "preview text…\n" + hint
    assert reload_ids(text) == ["abc123"]
    assert strip_hints(text) == "preview text…"


@pytest.mark.parametrize("arguments", ['{"id": "abc"}', '{"id": " abc "}', {"id": "abc"}])
def test_valid_arguments_give_the_id(arguments: str | dict[str, str]) -> None:
    assert parse_reload_arguments(arguments) == "abc"


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("{}", "non-empty string 'id'"),
        ('{"id": 7}', "non-empty string 'id'"),
        ('{"id": ""}', "non-empty string 'id'"),
        ('{"id": "a", "all": true}', "unexpected ['all']"),
    ],
)
def test_invalid_arguments_say_what_is_wrong(arguments: str, says: str) -> None:
    with pytest.raises(ReloadArgumentsError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_reload_arguments(arguments)
    assert issubclass(ReloadArgumentsError, MemoryInputError)


def test_reloaded_messages_are_rendered_in_full() -> None:
    messages = [user("the whole text " * 50), *tool_unit("fetch", {"url": "x"}, "page body")]
    text = format_reloaded("abc", messages)
    assert text.startswith("Reloaded 3 messages (id abc):")
    assert ("the whole text " * 50).strip() in text
    assert 'calls fetch({"url": "x"})' in text and "page body" in text


def test_an_unknown_id_gets_a_helpful_answer() -> None:
    assert "No offloaded content has the id 'nope'" in format_reloaded("nope", None)


def test_preview_cuts_at_a_word_boundary() -> None:
    text = "alpha beta gamma delta epsilon " * 20
    cut = preview(text, 40)
    assert len(cut) <= 40 and cut.endswith("…") and text.startswith(cut[:-1])
    assert preview("short", 40) == "short"


def test_a_reload_tool_call_is_answered_from_the_store() -> None:
    stored = {"abc": [user("the original text")]}
    assert "the original text" in reload_tool_result('{"id": "abc"}', stored)
    assert "the original text" in reload_tool_result({"id": "abc"}, stored.get)
    assert reload_tool_result('{"id": "zzz"}', stored).startswith("No offloaded content")
    assert reload_tool_result("{oops", stored).startswith("Cannot reload: ")
