"""Retention policies, and a JSON session-file store for in-process persistence.

MARSYS's three policies, per agent:

- ``single_run``: memory is cleared when a run ends;
- ``session``: memory lives as long as the runtime (the default);
- ``persistent``: memory is saved when the agent stops (and at each run's end)
  and loaded on the next start: into Redis on the Redis transport, or into a JSON
  session file in process (:class:`SessionStore`).

A session file is one JSON document per agent (AgentScope's ``JsonSession``)::

    {"schema": "actormem.session", "version": 1, "session_id": "...",
     "agent": "...", "saved_at": "2026-11-21T15:00:00Z",
     "components": {"longterm": {...}, "episodes": {...}, "insights": {...}}}

Each component is a part's snapshot (:class:`actormem.runtime.state.Durable`,
a msgpack value) written as JSON: the bytes the agent memory puts into its own
snapshot on the Redis transport.

It is written atomically (a temp file in the same directory, fsync, rename), so
a crash leaves the old file or the new one, never half of one. A file that
cannot be read raises :class:`SessionFileError` naming it and what is wrong; it
is never overwritten: a later save first moves it aside as ``*.corrupt-<time>``.
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, Protocol
from urllib.parse import quote

import anyio.to_thread
import msgspec
import structlog

from actormem.runtime.config import ConfigSection
from actormem.runtime.errors import ActormemError
from actormem.runtime.state import Durable, DurableChanges

__all__ = (
    "SCHEMA",
    "SCHEMA_VERSION",
    "AgentRetention",
    "RetainedPart",
    "RetentionConfig",
    "RetentionPolicy",
    "SessionFileError",
    "SessionStore",
    "erase_session",
    "part_snapshot",
)

log = structlog.get_logger("actormem.retention")

RetentionPolicy = Literal["single_run", "session", "persistent"]
SCHEMA: Final = "actormem.session"
SCHEMA_VERSION: Final = 1
DEFAULT_SESSION_DIR: Final = ".actormem/sessions"


class SessionFileError(ActormemError):
    """A session file cannot be read or written; the message names the file and why.

    The file itself is left as it was.
    """


class RetentionConfig(ConfigSection, frozen=True):
    """How long agents' memories live.

    Attributes:
        policy: the default: ``single_run``, ``session`` or ``persistent``.
        per_agent: policies for named agents, overriding the default.
        session_dir: where in-process persistent memory is kept.
        session_id: the session's name (a subdirectory of ``session_dir``).
        ttl: seconds an agent may stay idle (no command) before it is forgotten,
            as by ``forget()``; None keeps agents however long they are idle.
    """

    policy: RetentionPolicy = "session"
    per_agent: dict[str, RetentionPolicy] = msgspec.field(default_factory=dict)
    session_dir: str = DEFAULT_SESSION_DIR
    session_id: str = "default"
    ttl: float | None = None

    def __post_init__(self) -> None:
        if not self.session_id or "/" in self.session_id or self.session_id in (".", ".."):
            raise ValueError(f"session_id must be a plain name, got {self.session_id!r}")
        if self.ttl is not None and not 0 < self.ttl < float("inf"):
            raise ValueError(f"ttl must be a positive number of seconds, got {self.ttl}")

    def policy_for(self, agent: str) -> RetentionPolicy:
        """Return ``agent``'s policy."""
        return self.per_agent.get(agent, self.policy)

    def store(self) -> SessionStore:
        """Return the session-file store this config names."""
        return SessionStore(self.session_dir, self.session_id)


class RetainedPart(Durable, Protocol):
    """A part of an agent's memory that retention keeps: :class:`Durable` by a
    snapshot alone (its whole state on every ``durable_changes()`` call, no log),
    and able to forget everything."""

    def clear(self) -> None:
        """Forget everything."""
        ...


def part_snapshot(part: Durable) -> bytes | None:
    """The snapshot ``part`` hands over now (see :class:`RetainedPart`)."""
    return DurableChanges(*part.durable_changes()).snapshot


class _SessionDoc(msgspec.Struct, frozen=True, kw_only=True):
    schema: str
    version: int
    session_id: str
    agent: str
    saved_at: str
    components: dict[str, Any]


class SessionStore:
    """Per-agent JSON session files under ``<directory>/<session_id>/``.

    Args:
        directory: the root directory (created on the first save).
        session_id: the session's name.
    """

    def __init__(self, directory: str | Path, session_id: str = "default") -> None:
        self.directory = Path(directory) / session_id
        self.session_id = session_id
        self._corrupt: set[Path] = set()

    def path_for(self, agent: str) -> Path:
        """Return the file of ``agent`` (its name percent-encoded, so any name is safe).

        Raises:
            SessionFileError: the agent name is empty.
        """
        if not agent:
            raise SessionFileError("an agent name is needed for its session file")
        return self.directory / f"{quote(agent, safe='')}.json"

    def load(self, agent: str) -> dict[str, Any] | None:
        """Return ``agent``'s saved components, or None when it has no file.

        Raises:
            SessionFileError: the file is unreadable, not JSON, not a session file,
                from a newer schema version, or another agent's.
        """
        path = self.path_for(agent)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SessionFileError(f"{path}: cannot read session file: {exc.strerror}") from exc
        try:
            doc = self._decode(path, raw, agent)
        except SessionFileError:
            self._corrupt.add(path)
            raise
        self._corrupt.discard(path)
        return doc.components

    def _decode(self, path: Path, raw: bytes, agent: str) -> _SessionDoc:
        try:
            header = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise SessionFileError(f"{path}: corrupt session file (not valid JSON: {exc})") from exc
        if not isinstance(header, dict) or header.get("schema") != SCHEMA:
            raise SessionFileError(f"{path}: not an actormem session file (no schema {SCHEMA!r})")
        version = header.get("version")
        if not isinstance(version, int) or version < 1:
            raise SessionFileError(f"{path}: corrupt session file (bad version {version!r})")
        if version > SCHEMA_VERSION:
            raise SessionFileError(
                f"{path}: written by a newer actormem (schema version {version}; "
                f"this one reads up to {SCHEMA_VERSION})"
            )
        try:
            doc = msgspec.convert(header, type=_SessionDoc)
        except msgspec.ValidationError as exc:
            raise SessionFileError(f"{path}: corrupt session file ({exc})") from exc
        if doc.agent != agent:
            raise SessionFileError(f"{path}: holds agent {doc.agent!r}'s memory, not {agent!r}")
        return doc

    def save(self, agent: str, components: Mapping[str, Any]) -> Path:
        """Write ``agent``'s components atomically; return the file's path.

        Components may be msgspec Structs or JSON-able values. A file that failed
        to load is moved aside (``*.corrupt-<time>``) first, never overwritten.

        Raises:
            SessionFileError: the directory or file cannot be written, or a
                component cannot be encoded as JSON.
        """
        path = self.path_for(agent)
        doc = {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "session_id": self.session_id,
            "agent": agent,
            "saved_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "components": dict(components),
        }
        try:
            raw = msgspec.json.format(msgspec.json.encode(doc), indent=2)
        except (TypeError, msgspec.EncodeError) as exc:
            raise SessionFileError(f"{path}: cannot encode session state: {exc}") from exc
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path in self._corrupt and path.exists():
                self.quarantine(agent)
            _atomic_write(path, raw)
        except OSError as exc:
            raise SessionFileError(f"{path}: cannot write session file: {exc}") from exc
        return path

    def quarantine(self, agent: str) -> Path | None:
        """Move ``agent``'s file aside as ``<file>.corrupt-<time>``; return the new path."""
        path = self.path_for(agent)
        if not path.exists():
            return None
        target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        n = 1
        while target.exists():
            target = target.with_name(f"{target.name.split('~')[0]}~{n}")
            n += 1
        os.replace(path, target)
        self._corrupt.discard(path)
        log.warning("session_file_quarantined", path=str(path), moved_to=str(target))
        return target

    def delete(self, agent: str) -> bool:
        """Delete ``agent``'s file; return False when there was none."""
        try:
            self.path_for(agent).unlink()
        except FileNotFoundError:
            return False
        return True

    def erase(self, agent: str) -> int:
        """Delete ``agent``'s file and the corrupt copies of it set aside; return how
        many files went."""
        path = self.path_for(agent)
        doomed = [path, *path.parent.glob(f"{glob.escape(path.name)}.corrupt-*")]
        gone = 0
        for file in doomed:
            try:
                file.unlink()
            except FileNotFoundError:
                continue
            gone += 1
        if gone:
            log.info("session_file_erased", agent=agent, files=gone)
        return gone

    async def adelete(self, agent: str) -> int:
        """:meth:`erase` in a worker thread."""
        return await anyio.to_thread.run_sync(self.erase, agent)

    async def aload(self, agent: str) -> dict[str, Any] | None:
        """:meth:`load` in a worker thread (file I/O off the event loop)."""
        return await anyio.to_thread.run_sync(self.load, agent)

    async def asave(self, agent: str, components: Mapping[str, Any]) -> Path:
        """:meth:`save` in a worker thread."""
        return await anyio.to_thread.run_sync(self.save, agent, components)

    async def restore_parts(self, agent: str, parts: Mapping[str, Durable]) -> list[str] | None:
        """Load ``agent``'s saved parts into ``parts``, all or none (each saved value is
        a part's snapshot as JSON); parts missing from the file keep their state.

        Returns:
            The names of the parts loaded, or None when ``agent`` has no file.

        Raises:
            SessionFileError: the file is corrupt or a part's state is invalid
                (nothing is loaded then, and the file is kept).
        """
        saved = await self.aload(agent)
        if saved is None:
            return None
        found = {name: part for name, part in parts.items() if name in saved}
        before = {name: part_snapshot(part) for name, part in found.items()}
        loaded: list[str] = []
        for name, part in found.items():
            try:
                part.durable_restore(msgspec.msgpack.encode(saved[name]), [])
            except msgspec.DecodeError as exc:
                for done in loaded:
                    found[done].durable_restore(before[done], [])
                raise SessionFileError(
                    f"{self.path_for(agent)}: corrupt session file (component {name!r}: {exc})"
                ) from exc
            loaded.append(name)
        return loaded

    async def save_parts(self, agent: str, parts: Mapping[str, Durable]) -> Path:
        """Save every part's snapshot, as JSON, as ``agent``'s file; return its path.

        Raises:
            SessionFileError: the file cannot be written.
        """
        state = {}
        for name, part in parts.items():
            snapshot = part_snapshot(part)
            if snapshot is not None:
                state[name] = msgspec.msgpack.decode(snapshot)
        return await self.asave(agent, state)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable; not every platform lets us open a directory
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class AgentRetention:
    """Applies one agent's retention policy to the parts of its memory.

    The agent memory actor makes one in ``on_start`` (then awaits
    :meth:`restore`), calls :meth:`end_run` when a run ends and :meth:`close` in
    ``on_stop``. A part's snapshot is msgpack; in the session file it is the same
    value as JSON (one object per part, under its name).

    Args:
        agent: the agent's name.
        policy: its retention policy.
        store: where persistent state goes (needed for ``persistent`` only).
        parts: name → part.

    Raises:
        ValueError: ``persistent`` without a store.
    """

    def __init__(
        self,
        agent: str,
        policy: RetentionPolicy,
        store: SessionStore | None,
        parts: Mapping[str, RetainedPart],
    ) -> None:
        if policy == "persistent" and store is None:
            raise ValueError(f"agent {agent!r}: the persistent policy needs a session store")
        self.agent = agent
        self.policy = policy
        self.store = store
        self.parts = dict(parts)

    async def restore(self) -> bool:
        """Load the saved state (persistent policy only); return True if there was one.

        Parts missing from the file keep their state.

        Raises:
            SessionFileError: the file is corrupt or a part's state is invalid
                (nothing is loaded then, and the file is kept).
        """
        if self.policy != "persistent" or self.store is None:
            return False
        loaded = await self.store.restore_parts(self.agent, self.parts)
        if loaded is None:
            return False
        log.info("session_restored", agent=self.agent, components=sorted(loaded))
        return True

    async def save(self) -> None:
        """Save every part's state now (persistent policy only)."""
        if self.policy != "persistent" or self.store is None:
            return
        path = await self.store.save_parts(self.agent, self.parts)
        log.debug("session_saved", agent=self.agent, path=str(path))

    async def end_run(self) -> None:
        """A run ended: clear (single_run), or save (persistent); session keeps all."""
        if self.policy == "single_run":
            for part in self.parts.values():
                part.clear()
        else:
            await self.save()

    async def close(self) -> None:
        """The agent stops: persistent state is saved."""
        await self.save()


async def erase_session(config: RetentionConfig, agent: str, kept: AgentRetention | None) -> None:
    """Bring ``agent``'s session file (persistent policy only) in line with an
    erasure: saved again from ``kept`` (the parts left), else deleted."""
    if config.policy_for(agent) != "persistent":
        return
    if kept is not None:
        await kept.save()
    else:
        await config.store().adelete(agent)
