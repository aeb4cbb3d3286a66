"""Recording a run's model calls (``--record DIR``) and answering them again (``--replay DIR``).

A recording is a directory holding ``recording.json`` (the format, actormem's
version, the model) and ``calls.jsonl``: one JSON object a line per chat
completion the run's turns asked for, written as each answer comes: ``key``,
``agent``, ``step``, ``attempts`` (retries included), ``request`` and
``response`` (the completion as the endpoint sent it).

The key is the SHA-256 of the request (model, messages, tools, sampling
parameters) as canonical JSON, with the times of day of the memory's provenance
lines (``2026-11-21T14:50Z``) masked, so that a replay on another day finds its
answers. Replaying answers each request from the recorded line of the same key
(requests of the same key in the order they were recorded) and counts its calls,
retries and tokens as the recorded run did; a request with no recorded answer is
a :class:`~actormem.actors.app.simulation.brains.protocol.BrainError` naming the
agent and the step.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

import msgspec

from actormem.actors.app.simulation.brains.protocol import BrainError
from actormem.runtime.errors import ConfigError

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

__all__ = (
    "CALLS",
    "MANIFEST",
    "Recorder",
    "Replayer",
    "check_record_dir",
    "request_key",
)

MANIFEST: Final = "recording.json"
CALLS: Final = "calls.jsonl"
#: The format of a recording this version writes and reads.
FORMAT: Final = 1

_TIME_OF_DAY: Final = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z\b")


class _Manifest(msgspec.Struct, forbid_unknown_fields=False):
    format: int
    model: str
    version: str = ""


class _Entry(msgspec.Struct):
    key: str
    agent: str
    step: int
    attempts: int
    request: dict[str, Any]
    response: dict[str, Any]


def request_key(request: dict[str, Any]) -> str:
    """The key of a chat completion request: a SHA-256 of its canonical JSON, with
    times of day masked (see the module docstring)."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(_TIME_OF_DAY.sub("<time>", text).encode()).hexdigest()


def _where(agent: str, step: int) -> str:
    return f"{agent} at step {step}" if agent else "a turn"


def check_record_dir(path: Path) -> None:
    """Refuse a ``--record`` directory that cannot take a recording, before a run starts.

    Raises:
        ConfigError: ``path`` is a file, already holds a recording, or cannot be
            made or written (one line naming it).
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--record {path}: it is not a directory")
    if (path / CALLS).exists() or (path / MANIFEST).exists():
        raise ConfigError(
            f"--record {path}: it already holds a recording (replay it with --replay, "
            "or record into another directory)"
        )
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"--record {path}: cannot write in {existing} (permission denied)")


class Recorder:
    """Writes a run's model calls into a recording directory as they are answered.

    Args:
        path: the directory (made if missing; see :func:`check_record_dir`).
        model: the model the run asks.
        version: actormem's version, for the manifest.

    Raises:
        ConfigError: the directory cannot take a recording.
    """

    def __init__(self, path: Path, model: str, version: str) -> None:
        check_record_dir(path)
        self.path = path
        try:
            path.mkdir(parents=True, exist_ok=True)
            manifest = _Manifest(format=FORMAT, model=model, version=version)
            (path / MANIFEST).write_bytes(msgspec.json.encode(manifest) + b"\n")
            self._file: TextIO | None = (path / CALLS).open("w", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--record {path}: {exc.strerror}") from exc

    def write(
        self,
        request: dict[str, Any],
        response: ChatCompletion,
        *,
        agent: str,
        step: int,
        attempts: int,
    ) -> None:
        """Append one answered request (flushed at once: a crash keeps what came before)."""
        if self._file is None:
            raise BrainError(f"--record {self.path}: the recording is closed")
        entry = _Entry(
            key=request_key(request),
            agent=agent,
            step=step,
            attempts=attempts,
            request=request,
            response=response.model_dump(mode="json", exclude_unset=True),
        )
        try:
            self._file.write(msgspec.json.encode(entry).decode() + "\n")
            self._file.flush()
        except OSError as exc:
            raise BrainError(f"--record {self.path}: {exc.strerror}") from exc

    def close(self) -> None:
        """Close the file (idempotent)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()


class Replayer:
    """A recording loaded to answer a run's model requests with no network.

    Args:
        path: the recording directory.

    Attributes:
        model: the model the recorded run asked.

    Raises:
        ConfigError: no recording in ``path``, or a line of it that cannot be read
            (named by file and line).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_dir():
            raise ConfigError(f"--replay {path}: no such directory")
        manifest_path, calls_path = path / MANIFEST, path / CALLS
        if not manifest_path.is_file() or not calls_path.is_file():
            raise ConfigError(f"--replay {path}: no recording there (no {MANIFEST} and {CALLS})")
        try:
            manifest = msgspec.json.decode(manifest_path.read_bytes(), type=_Manifest)
            lines = calls_path.read_bytes().splitlines()
        except OSError as exc:
            raise ConfigError(f"--replay {path}: {exc.strerror}") from exc
        except msgspec.MsgspecError as exc:
            raise ConfigError(f"--replay {manifest_path}: {exc}") from exc
        if manifest.format != FORMAT:
            raise ConfigError(
                f"--replay {path}: recording format {manifest.format} is not supported "
                f"(this version reads {FORMAT})"
            )
        self.model = manifest.model
        self._answers: dict[str, deque[tuple[ChatCompletion, int]]] = {}
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = msgspec.json.decode(line, type=_Entry)
            except msgspec.MsgspecError as exc:
                raise ConfigError(f"--replay {calls_path}:{number}: {exc}") from exc
            completion = _completion(entry.response, f"--replay {calls_path}:{number}")
            # Keyed by the request as stored: an edited request answers no request.
            queue = self._answers.setdefault(request_key(entry.request), deque())
            queue.append((completion, entry.attempts))

    def __len__(self) -> int:
        return sum(len(q) for q in self._answers.values())

    def answer(
        self, request: dict[str, Any], *, agent: str, step: int
    ) -> tuple[ChatCompletion, int]:
        """The recorded completion answering ``request``, and the attempts it took.

        Raises:
            BrainError: no recorded answer to it (naming the agent and the step).
        """
        queue = self._answers.get(request_key(request))
        if not queue:
            raise BrainError(
                f"--replay {self.path}: no recorded answer to the model request of "
                f"{_where(agent, step)} (the run has gone another way than the recorded "
                "one: another config, seed, scenario or version, or an edited recording)"
            )
        return queue.popleft()


def _completion(data: dict[str, Any], where: str) -> ChatCompletion:
    from openai.types.chat import ChatCompletion
    from pydantic import ValidationError

    try:
        return ChatCompletion.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(p) for p in first["loc"])
        raise ConfigError(
            f"{where}: the response is no chat completion ({place}: {first['msg']})"
        ) from None
