"""Summarizers: the offline extractive one (the default) and the protocol they share.

A summarizer turns a span of messages into text of at most ``max_tokens`` tokens.
The offline summarizer needs no network: it picks whole sentences of the span,
preferring those that carry names, numbers, dates and decisions (the details an
agent most needs later and a naive "first N words" cut loses), greedily so that
each pick covers facts the summary does not hold yet, and keeps them in their
original order under a header naming the speakers and tools of the span.

The LLM summarizer (:mod:`actormem.actors.compression.llm`) falls back to this one.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Final, Literal, Protocol

from actormem.actors.compression._slices import Steps, TimeSlicer, run_sliced
from actormem.actors.compression.offload import strip_hints
from actormem.actors.messages import Message
from actormem.runtime.tokens import TokenCounter

__all__ = (
    "OfflineSummarizer",
    "Purpose",
    "RunUsage",
    "Summarizer",
    "extract_facts",
)

#: What a span is; an LLM summarizer words its instructions by it.
Purpose = Literal["tool_run", "round", "history", "current_round"]

_DIGITS: Final = re.compile(r"\d+")
_LABELLED: Final = re.compile(r"^([\w .'-]{1,48}): (.+)$")
_PIECE_SPLIT: Final = re.compile(r"(?<=[.!?;])\s+|\n+")
_MAX_PIECE_CHARS: Final = 280
#: Pieces looked at per span; a huge payload's tail adds little a reload cannot give.
_MAX_PIECES: Final = 3000
#: Pieces handled between two pauses (see :mod:`actormem.actors.compression._slices`).
_STEP: Final = 32
#: Pieces whose reading (tokens, facts, decision) a summarizer keeps: a compression
#: reads its round summaries' sentences again when it merges the history, and every
#: later merge reads the history summary's sentences again.
_KNOWN_PIECES: Final = 4096
#: Summaries a summarizer keeps, by what they were made from: every compression of
#: an agent tries again the rounds that no summary could shrink (see
#: :mod:`actormem.actors.compression.rounds`), and gets the same summary each time.
_KNOWN_SUMMARIES: Final = 2048
#: The most text (characters) of a span whose summary is kept: the rounds tried
#: again are short, and the kept summaries hold their spans' text in their keys.
_KNOWN_SPAN_CHARS: Final = 2000
_NUMBER: Final = re.compile(r"[#$€£]?\b[\w.:/-]*\d[\w.:/%-]*")
_MONTH: Final = (
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}(?:,\s*\d{4})?"
)
_DATE: Final = re.compile(
    rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}/\d{{1,2}}/\d{{2,4}}\b|\b{_MONTH}|\b\d{{1,2}}\s+"
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?(?:\s+\d{4})?"
    r"|\b(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|today|tomorrow|yesterday)\b",
    re.IGNORECASE,
)
_NAME: Final = re.compile(r"\b[A-Z][\w'-]*[a-z][\w'-]*(?:\s+[A-Z][\w'-]*[a-z][\w'-]*)*")
_DECISION: Final = re.compile(
    r"\b(?:decid\w*|decision|agree\w*|chose|choose|chosen|will|won't|must|shall|plan\w*|"
    r"approv\w*|reject\w*|confirm\w*|conclu\w*|resolv\w*|commit\w*|select\w*|final\w*|"
    r"going to|let's|we'll|i'll|settled|assign\w*|deadline|todo|next step\w*)\b",
    re.IGNORECASE,
)
#: Capitalised words that start sentences without naming anything.
_NOT_NAMES: Final = frozenset(
    str.split(
        "a an the i we you he she they it this that these those there here my our "
        "your his her their its and but or so if when then yes no ok okay please "
        "thanks thank hi hello sure also what why how who where which let note summary "
        "user assistant tool result calls true false null none"
    )
)


class RunUsage:
    """What one compression spent on summaries (shared by its summarizer calls).

    Attributes:
        llm_calls: requests sent to the LLM (retries included).
        llm_tokens: prompt plus completion tokens the LLM reported (or we counted).
        cost: dollars spent, by the configured prices.
        fallbacks: summaries that fell back to the offline summarizer.
        summaries: summaries written.
        reserved_tokens: the most that requests in flight may still spend.
        reserved_cost: the same in dollars.
        fallback_reasons: why summaries fell back (``timeout``, ``token_cap``, ...).
    """

    __slots__ = (
        "cost",
        "fallback_reasons",
        "fallbacks",
        "llm_calls",
        "llm_tokens",
        "reserved_cost",
        "reserved_tokens",
        "summaries",
    )

    def __init__(self) -> None:
        self.llm_calls = 0
        self.llm_tokens = 0
        self.cost = 0.0
        self.fallbacks = 0
        self.summaries = 0
        self.reserved_tokens = 0
        self.reserved_cost = 0.0
        self.fallback_reasons: set[str] = set()

    @property
    def fell_back(self) -> bool:
        """True when any summary of the run fell back to the offline summarizer."""
        return self.fallbacks > 0


class Summarizer(Protocol):
    """Writes the summary of a span of messages."""

    #: ``offline`` or ``openai``: reported in outcomes and logs.
    name: str

    async def summarize(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        purpose: Purpose,
        usage: RunUsage,
    ) -> str:
        """Return a summary of ``messages`` of at most ``max_tokens`` tokens.

        Never raises for a failing backend: a summarizer that cannot do its job
        falls back to the offline one and counts it in ``usage``.
        """
        ...

    async def aclose(self) -> None:
        """Release what the summarizer holds (HTTP connections)."""
        ...


class _Reading:
    """What a piece's text alone decides: its tokens, its facts, whether it decides."""

    __slots__ = ("decision", "facts", "tokens")

    def __init__(self, text: str, counter: TokenCounter) -> None:
        self.tokens = counter.count_text(text)
        self.facts = extract_facts(text)
        self.decision = bool(_DECISION.search(text))


class _Piece:
    __slots__ = (
        "decision",
        "facts",
        "lead",
        "order",
        "repeats",
        "score_base",
        "speaker",
        "text",
        "tokens",
    )

    def __init__(
        self, order: int, speaker: str, text: str, tokens: int, lead: bool, reading: _Reading
    ) -> None:
        self.order = order
        self.speaker = speaker
        self.text = text
        self.tokens = tokens
        self.facts = reading.facts
        self.decision = reading.decision
        self.lead = lead
        self.score_base = (2.0 if self.decision else 0.0) + (1.0 if lead else 0.0)
        self.repeats = 1


def _shape(text: str) -> str:
    """A piece with its digits masked: templated lines ("round 7", "page 12") share one."""
    return _DIGITS.sub("#", text.lower())


def extract_facts(text: str) -> frozenset[str]:
    """Return the facts a summary should keep from ``text``: names, numbers and dates.

    Names are capitalised words (not the ones that merely start a sentence, such
    as "The"); numbers are tokens holding a digit (codes, amounts, versions, ids);
    dates include ISO and written forms and weekdays.
    """
    facts: set[str] = set()
    for match in _DATE.finditer(text):
        facts.add(match.group(0).lower())
    for match in _NUMBER.finditer(text):
        facts.add(match.group(0).strip(".,:;").lower())
    for match in _NAME.finditer(text):
        words = [w for w in match.group(0).split() if w.lower() not in _NOT_NAMES]
        if words:
            facts.add(" ".join(words).lower())
    facts.discard("")
    return frozenset(facts)


def _speaker(message: Message) -> str:
    if message.role == "tool":
        return f"{message.name or 'tool'} result"
    return message.name or message.role


def _made_from(message: Message, text: str) -> tuple[object, ...]:
    """What of ``message`` (whose text is ``text``) its part of an offline summary
    depends on."""
    return (
        message.role,
        message.name,
        text,
        tuple((call.name, call.arguments) for call in message.tool_calls),
        "compressed" in message.metadata,
    )


def _chunks(text: str) -> list[str]:
    """Split text into sentence-sized pieces, cutting overlong ones at word boundaries."""
    out: list[str] = []
    for raw in _PIECE_SPLIT.split(text):
        piece = " ".join(raw.split())
        while len(piece) > _MAX_PIECE_CHARS:
            cut = piece.rfind(" ", 0, _MAX_PIECE_CHARS)
            if cut < _MAX_PIECE_CHARS // 2:
                cut = _MAX_PIECE_CHARS
            out.append(piece[:cut])
            piece = piece[cut:].lstrip()
        if piece:
            out.append(piece)
    return out


def _header(messages: Sequence[Message], pieces: Sequence[_Piece]) -> str:
    """One line naming how many messages, who spoke and which tools were used."""
    speakers: list[str] = []
    for p in pieces:
        if not p.speaker.endswith(" result") and p.speaker not in speakers:
            speakers.append(p.speaker)
    tools: list[str] = []
    for m in messages:
        for call in m.tool_calls:
            if call.name not in tools:
                tools.append(call.name)
    # (How many messages, the summary's reload hint says.)
    header = f"From {', '.join(speakers)}" if speakers else "Tool results"
    if tools:
        header += f"; tools: {', '.join(tools)}"
    return header + "."


class OfflineSummarizer:
    """Extractive summaries, offline and deterministic (the default summarizer).

    Args:
        counter: counts tokens so summaries fit their budget exactly.
    """

    name = "offline"

    def __init__(self, counter: TokenCounter) -> None:
        self._counter = counter
        # Text -> its reading, oldest first; pure, so a kept one is as good as new.
        self._readings: dict[str, _Reading] = {}
        # What a summary was made from -> the summary, least recently used first;
        # pure as well.
        self._summaries: dict[tuple[object, ...], str] = {}

    async def summarize(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        purpose: Purpose,
        usage: RunUsage,
    ) -> str:
        """Return an extractive summary of ``messages`` in at most ``max_tokens`` tokens.

        The work pauses every :data:`~actormem.actors.compression._slices.SLICE_SECONDS`
        so other actors keep running, and can be cancelled at those pauses.
        """
        usage.summaries += 1
        return await self.summarize_sliced(messages, max_tokens, TimeSlicer())

    async def summarize_sliced(
        self, messages: Sequence[Message], max_tokens: int, slicer: TimeSlicer
    ) -> str:
        """The summary, pausing with ``slicer`` (shared by a compression's passes)."""
        texts = [m.text() for m in messages]
        if sum(map(len, texts)) > _KNOWN_SPAN_CHARS:
            return await run_sliced(self._steps(messages, max_tokens), slicer)
        key = (max_tokens, *map(_made_from, messages, texts))
        known = self._summaries.pop(key, None)
        if known is not None:
            self._summaries[key] = known  # the newest again: kept the longest
            return known
        summary = await run_sliced(self._steps(messages, max_tokens), slicer)
        self._summaries[key] = summary
        if len(self._summaries) > _KNOWN_SUMMARIES:
            del self._summaries[next(iter(self._summaries))]
        return summary

    def _steps(self, messages: Sequence[Message], max_tokens: int) -> Steps[str]:
        counter = self._counter
        pieces = yield from self._pieces(messages)
        header = _header(messages, pieces)
        budget = max_tokens - counter.count_text(header) - 1
        if budget <= 0:
            return counter.truncate(header, max_tokens)
        chosen = yield from self._choose(pieces, budget)
        chosen.sort(key=lambda p: p.order)
        lines: list[str] = []
        last_speaker = None
        for piece in chosen:
            # Every piece ends a sentence, so that summarizing this summary again
            # splits it into the same pieces (a fact is never glued to a neighbour).
            text = piece.text if piece.text[-1] in ".!?;:" else piece.text + ";"
            if piece.speaker != last_speaker:
                lines.append(f"{piece.speaker}: {text}")
                last_speaker = piece.speaker
            else:
                lines[-1] += f" {text}"
        summary = header + ("\n" + "\n".join(lines) if lines else "")
        # Joining can merge tokens differently than counted apart; cut to be exact.
        return counter.truncate(summary, max_tokens)

    def _pieces(self, messages: Sequence[Message]) -> Steps[list[_Piece]]:
        texts: list[tuple[str, str, bool]] = []  # speaker, text, leads its message
        for m in messages:
            yield
            speaker = _speaker(m)
            for call in m.tool_calls:
                call_text = f"called {call.name}({' '.join(call.arguments.split())})"
                texts.append((speaker, call_text, False))
            text = strip_hints(m.text())
            if "compressed" not in m.metadata:
                texts.extend((speaker, chunk, i == 0) for i, chunk in enumerate(_chunks(text)))
            else:
                # A summary summarized again: its first line is label and header, not
                # content, and each line after it names its original speaker.
                for line in text.split("\n")[1:]:
                    labelled = _LABELLED.match(line)
                    who, body = labelled.groups() if labelled else (speaker, line)
                    texts.extend((who, chunk, i == 0) for i, chunk in enumerate(_chunks(body)))
            if len(texts) >= _MAX_PIECES:
                break
        texts = texts[:_MAX_PIECES]
        # Each piece is charged its speaker label too (paid once per line in fact), so
        # that the joined summary fits without being cut mid-sentence.
        label = {sp: self._counter.count_text(f"{sp}: ") for sp in {sp for sp, _, _ in texts}}
        pieces: list[_Piece] = []
        shapes: list[str] = []
        for order, (speaker, text, lead) in enumerate(texts):
            reading = self._readings.get(text)
            if reading is None:
                yield  # counting a piece and finding its facts takes a while
                reading = self._read(text)
            elif order % _STEP == _STEP - 1:
                yield  # a known piece is quick, thousands of them are not
            tokens = reading.tokens + 1 + label[speaker]
            pieces.append(_Piece(order, speaker, text, tokens, lead, reading))
            shapes.append(_shape(text))
        repeats = Counter(shapes)
        for p, shape in zip(pieces, shapes, strict=True):
            p.repeats = repeats[shape]
        return pieces

    def _read(self, text: str) -> _Reading:
        """The reading of a piece's text, kept for the next time the text comes up.

        One text at a time: tiktoken's batch call starts a thread pool each time,
        which costs more than these sentence-sized pieces do.
        """
        reading = _Reading(text, self._counter)
        if len(self._readings) >= _KNOWN_PIECES:
            del self._readings[next(iter(self._readings))]
        self._readings[text] = reading
        return reading

    @staticmethod
    def _choose(pieces: list[_Piece], budget: int) -> Steps[list[_Piece]]:
        """Greedy: each step takes the piece adding the most new facts per token.

        It stops when what is left adds no fact, no decision and no message's
        opening sentence: a summary is as short as its content, not as long as
        its budget (padding would crowd out other summaries' facts).
        """
        covered: set[str] = set()
        chosen: list[_Piece] = []
        remaining = [p for p in pieces if p.tokens <= budget]
        seen_texts: set[str] = set()
        while remaining and budget > 0:
            best: _Piece | None = None
            best_score = -1.0
            for k, p in enumerate(remaining):
                if k % _STEP == _STEP - 1:
                    yield
                if p.tokens > budget:
                    continue
                new = len(p.facts - covered)
                # New facts dominate; decisions next; shorter pieces break ties so
                # more of them fit. Earlier pieces win exact ties (stable order).
                # Templated pieces ("round 7: ...", one per search) carry little that
                # their siblings do not, so a shape's weight is shared among its repeats.
                score = (3.0 * new + p.score_base + 0.1) / (p.tokens**0.5) / p.repeats
                if score > best_score:
                    best, best_score = p, score
            if best is None:
                break
            if not (best.facts - covered) and not best.decision and not best.lead:
                break
            remaining.remove(best)
            if best.text in seen_texts:
                continue
            seen_texts.add(best.text)
            chosen.append(best)
            covered |= best.facts
            budget -= best.tokens
        return chosen

    async def aclose(self) -> None:
        """Nothing to release."""
