"""The offline extractive summarizer keeps names, numbers, dates and decisions, within budget."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from actormem.actors.compression import OfflineSummarizer, RunUsage, summarizers
from actormem.actors.compression.summarizers import extract_facts
from actormem.actors.messages import Message
from actormem.runtime.tokens import get_counter
from tests.actors.compression._build import assistant, chatter, tool_unit, user

pytestmark = pytest.mark.anyio


def span() -> list[Message]:
    return [
        user("Hi there. " + chatter(6) + " Mara Lindqvist was born on 1987-03-14."),
        assistant("Thanks for telling me. " + chatter(6)),
        user(chatter(4) + " The vault code is 4821. " + chatter(4)),
        assistant(chatter(5) + " We decided to move the launch to March 3, 2027."),
        *tool_unit("weather", {"city": "Bergen"}, "Rain, 11 degrees. " + chatter(5)),
        user(chatter(8)),
    ]


async def summarize(messages: list[Message], max_tokens: int) -> str:
    summarizer = OfflineSummarizer(get_counter())
    usage = RunUsage()
    text = await summarizer.summarize(messages, max_tokens=max_tokens, purpose="round", usage=usage)
    assert usage.summaries == 1 and not usage.fell_back
    return text


async def test_keeps_names_numbers_dates_and_decisions() -> None:
    text = await summarize(span(), 100)
    for fact in ("Mara Lindqvist", "1987-03-14", "4821", "decided", "March 3, 2027", "Bergen"):
        assert fact in text, (fact, text)
    assert "we talked a little more" not in text  # chatter is what goes


async def test_fits_the_budget_exactly() -> None:
    counter = get_counter()
    for budget in (5, 20, 60, 200):
        text = await summarize(span(), budget)
        assert 0 < counter.count_text(text) <= budget


async def test_keeps_sentences_in_their_original_order_with_speakers() -> None:
    text = await summarize(span(), 200)
    assert text.index("1987-03-14") < text.index("4821") < text.index("2027")
    assert text.splitlines()[0] == "From user, assistant; tools: weather."


async def test_is_deterministic() -> None:
    assert await summarize(span(), 80) == await summarize(span(), 80)


async def test_summarizing_a_summary_keeps_the_original_speakers() -> None:
    first = await summarize(span(), 120)
    again = Message(role="assistant", content=first, metadata={"compressed": "round_summary"})
    text = await summarize([again], 80)
    assert "4821" in text and "user: " in text


def test_extract_facts_finds_names_numbers_and_dates() -> None:
    facts = extract_facts("The vault code is 4821. Mara met Olav Berg on 2024-05-01, a Friday.")
    assert {"4821", "mara", "olav berg", "2024-05-01", "friday"} <= facts
    assert "the" not in facts


async def test_a_long_summary_can_be_cancelled_while_it_works() -> None:
    # Thousands of sentences are far more work than the deadline below allows; the
    # summarizer pauses while it works, so the deadline ends it partway.
    huge = [
        user(f"line {i}: Mara counted {i} crates on Tuesday. " + chatter(3)) for i in range(3000)
    ]
    summarizer = OfflineSummarizer(get_counter())
    finished = False
    with anyio.move_on_after(0.001):
        await summarizer.summarize(huge, max_tokens=200, purpose="history", usage=RunUsage())
        finished = True
    assert not finished


def count_facts_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the texts whose facts the summarizers look for from now on."""
    read: list[str] = []

    def counting(text: str) -> frozenset[str]:
        read.append(text)
        return extract_facts(text)

    monkeypatch.setattr(summarizers, "extract_facts", counting)
    return read


def count_work(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Note each summary the summarizers make from now on (not those they kept)."""
    worked: list[int] = []
    run_sliced = summarizers.run_sliced

    async def counting(steps: Any, slicer: Any) -> Any:
        worked.append(1)
        return await run_sliced(steps, slicer)

    monkeypatch.setattr(summarizers, "run_sliced", counting)
    return worked


async def summarize_twice(summarizer: OfflineSummarizer, max_tokens: int) -> list[str]:
    """Summarize ``span()`` twice with one summarizer."""
    return [
        await summarizer.summarize(span(), max_tokens=max_tokens, purpose="round", usage=RunUsage())
        for _ in range(2)
    ]


async def test_a_piece_met_again_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summarizers, "_KNOWN_SUMMARIES", 0)  # the pieces alone are kept
    fresh = await summarize(span(), 100)
    read = count_facts_calls(monkeypatch)
    summarizer = OfflineSummarizer(get_counter())
    assert await summarize_twice(summarizer, 100) == [fresh, fresh]
    assert read and len(read) == len(set(read))  # each piece read once over both runs
    # A summary summarized again along with new messages: as a fresh summarizer does it.
    again = Message(role="assistant", content=fresh, metadata={"compressed": "round_summary"})
    merged = await summarizer.summarize(
        [again, *span()], max_tokens=100, purpose="history", usage=RunUsage()
    )
    assert merged == await summarize([again, *span()], 100)


async def test_the_pieces_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summarizers, "_KNOWN_PIECES", 2)
    monkeypatch.setattr(summarizers, "_KNOWN_SUMMARIES", 0)
    fresh = await summarize(span(), 80)
    read = count_facts_calls(monkeypatch)
    assert await summarize_twice(OfflineSummarizer(get_counter()), 80) == [fresh, fresh]
    # Only the last two pieces were kept: the second run read the others again.
    assert len(read) >= 2 * len(set(read)) - 2


async def test_a_span_summarized_again_gets_its_summary_without_the_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(summarizers, "_KNOWN_SUMMARIES", 2)
    monkeypatch.setattr(summarizers, "_KNOWN_SPAN_CHARS", 100_000)
    summarizer = OfflineSummarizer(get_counter())
    fresh = await summarize(span(), 100)
    assert await summarizer.summarize(span(), max_tokens=100, purpose="round", usage=RunUsage())
    worked = count_work(monkeypatch)
    assert await summarize_twice(summarizer, 100) == [fresh, fresh]
    assert not worked
    # What the summary depends on is in what it is known by: another budget, or
    # another text, is summarized afresh.
    shorter = await summarizer.summarize(span(), max_tokens=60, purpose="round", usage=RunUsage())
    assert shorter == await summarize(span(), 60) and shorter != fresh
    edited = [*span()[:-1], user("Olav decided to sail on Friday.")]
    other = await summarizer.summarize(edited, max_tokens=100, purpose="round", usage=RunUsage())
    assert other == await summarize(edited, 100) and "Friday" in other
    # Only the two summaries used last are kept: the first one is made again.
    worked.clear()
    assert await summarize_twice(summarizer, 100) == [fresh, fresh]
    assert len(worked) == 1


async def test_the_summary_of_a_long_span_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summarizers, "_KNOWN_SPAN_CHARS", sum(len(m.text()) for m in span()) - 1)
    worked = count_work(monkeypatch)
    summarizer = OfflineSummarizer(get_counter())
    assert await summarize_twice(summarizer, 100) == [await summarize(span(), 100)] * 2
    assert len(worked) == 3  # both runs, and the fresh summarizer's
