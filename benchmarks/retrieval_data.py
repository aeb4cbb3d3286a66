"""Labelled long conversations for the retrieval benchmark (the LoCoMo format).

A data set is a directory of JSON files, one conversation each: ``session_N`` (a
list of turns ``{speaker, dia_id, text}``, some with a ``blip_caption`` of a shared
photo), ``session_N_date_time`` ("1:56 pm on 8 May, 2023") and ``qa`` (questions
with a ``category`` and the ``evidence`` dia ids of the turns that answer them).
LoCoMo's adversarial questions (category 5: what they ask is not in the
conversation) and questions without evidence are left out.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import msgspec

from actormem.runtime import ActormemError

__all__ = ("Conversation", "DataError", "Question", "Turn", "load_conversations", "turn_text")

#: LoCoMo's category of questions the conversation has no answer to.
ADVERSARIAL = 5
#: How LoCoMo writes a session's date.
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"


class DataError(ActormemError):
    """A data set that cannot be read or is not in the expected format."""


class Turn(msgspec.Struct, frozen=True):
    """One turn: its dia id, speaker, text and when it was said."""

    dia_id: str
    speaker: str
    text: str
    said: float
    session_date: str


class Question(msgspec.Struct, frozen=True):
    """A question, its category and the dia ids of its evidence."""

    text: str
    category: int
    evidence: frozenset[str]


class Conversation(msgspec.Struct, frozen=True):
    """One conversation: its name (the file's stem), turns and questions."""

    name: str
    turns: list[Turn]
    questions: list[Question]


def turn_text(turn: dict[str, Any]) -> str:
    """A turn as a user message's content: its text, and the caption of the photo
    it shares (the only trace of the photo in text)."""
    text = str(turn.get("text", ""))
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


def _said(raw: Any, where: str) -> float:
    try:
        when = datetime.datetime.strptime(str(raw).strip(), _DATE_FORMAT)
    except ValueError:
        why = f"{where}: a session date like '1:56 pm on 8 May, 2023', got {raw!r}"
        raise DataError(why) from None
    return when.replace(tzinfo=datetime.UTC).timestamp()


def _conversation(path: Path) -> Conversation:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: a conversation is a JSON object, got {type(data).__name__}")
    body = data.get("conversation", data)
    turns: list[Turn] = []
    n = 1
    while isinstance(body.get(f"session_{n}"), list):
        date = body.get(f"session_{n}_date_time")
        start = _said(date, f"{path}: session_{n}_date_time")
        for k, turn in enumerate(body[f"session_{n}"]):
            if not isinstance(turn, dict) or "dia_id" not in turn or "speaker" not in turn:
                raise DataError(f"{path}: session_{n} turn {k}: needs dia_id and speaker")
            # Turns a second apart: the order they were said in, on the session's date.
            turns.append(
                Turn(str(turn["dia_id"]), str(turn["speaker"]), turn_text(turn), start + k, date)
            )
        n += 1
    if not turns:
        raise DataError(f"{path}: no session_1 list of turns")
    known = {t.dia_id for t in turns}
    questions = []
    for q in data.get("qa", []):
        # "D8:6; D9:17" in one entry names two turns.
        evidence = frozenset(
            e.strip() for raw in q.get("evidence") or () for e in str(raw).split(";") if e.strip()
        )
        evidence &= known
        if evidence and q.get("question") and q.get("category") != ADVERSARIAL:
            questions.append(Question(str(q["question"]), int(q.get("category", 0)), evidence))
    return Conversation(path.stem, turns, questions)


def load_conversations(path: Path, limit: int | None = None) -> list[Conversation]:
    """The conversations of the ``*.json`` files in ``path`` (or of the one file
    ``path``), by name; the first ``limit`` of them when given.

    Raises:
        DataError: no such path, no JSON file in it, or a file in another format
            (the message names the file and what was wrong).
    """
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise DataError(f"{path}: no *.json conversation in it")
    elif path.is_file():
        files = [path]
    else:
        raise DataError(f"{path}: no such file or directory")
    return [_conversation(f) for f in files[:limit]]
