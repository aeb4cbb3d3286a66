"""Retention policies and the JSON session file, across a runtime restart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from actormem.actors.messages import Message
from actormem.actors.pool.insights import make_insight
from actormem.actors.recall.episodes import EpisodicMemory
from actormem.actors.recall.inbox import InsightInbox
from actormem.actors.recall.longterm import LongTermMemory, LongTermState
from actormem.actors.retention import (
    SCHEMA_VERSION,
    AgentRetention,
    RetentionConfig,
    SessionFileError,
    SessionStore,
)
from actormem.runtime import Actor, ActorContext, Runtime
from actormem.runtime.config import decode_config
from actormem.runtime.errors import ConfigError, HandlerError


class Remember(msgspec.Struct, frozen=True, tag=True):
    text: str


class Recall(msgspec.Struct, frozen=True, tag=True):
    query: str


class EndRun(msgspec.Struct, frozen=True, tag=True):
    pass


class AgentMemory(Actor):
    """A stand-in for the lead's memory actor: owns the components and their retention."""

    def __init__(self, ctx: ActorContext, config: RetentionConfig) -> None:
        super().__init__(ctx)
        self.longterm = LongTermMemory()
        self.episodes = EpisodicMemory()
        self.inbox = InsightInbox()
        self.retention = AgentRetention(
            ctx.key,
            config.policy_for(ctx.key),
            config.store(),
            {"longterm": self.longterm, "episodes": self.episodes, "insights": self.inbox},
        )

    async def on_start(self) -> None:
        await self.retention.restore()

    async def on_stop(self) -> None:
        await self.retention.close()

    async def receive(self, message: Any) -> Any:
        match message:
            case Remember(text=text):
                msg = Message(role="user", content=text, importance=0.9)
                self.longterm.record([msg])
                self.episodes.add(msg)
                self.inbox.accept(make_insight(text, topic="t", importance=0.5, source="x"))
                return None
            case Recall(query=query):
                found = self.longterm.retrieve_lexical(query, 1)
                return (
                    [r.entry.text for r in found],
                    len(self.episodes.core()),
                    len(self.inbox),
                )
            case EndRun():
                await self.retention.end_run()
                return None
        raise TypeError(type(message).__name__)


async def _run(config: RetentionConfig, *messages: Any) -> list[Any]:
    async with Runtime() as rt:
        rt.register("memory", lambda ctx: AgentMemory(ctx, config))
        return [await rt.ref("memory/ada").ask(m) for m in messages]


def _config(tmp_path: Path, policy: str, **kw: Any) -> RetentionConfig:
    return decode_config(
        {"policy": policy, "session_dir": str(tmp_path), **kw}, RetentionConfig, source="t"
    )


@pytest.mark.anyio
async def test_persistent_memory_survives_a_restart(tmp_path: Path) -> None:
    config = _config(tmp_path, "persistent")
    await _run(config, Remember("The lighthouse keeper is called Ivo."))
    path = config.store().path_for("ada")
    doc = json.loads(path.read_text())
    assert doc["schema"] == "actormem.session" and doc["version"] == SCHEMA_VERSION
    assert set(doc["components"]) == {"longterm", "episodes", "insights"}
    (recalled,) = await _run(config, Recall("lighthouse keeper"))
    assert recalled == (["The lighthouse keeper is called Ivo."], 1, 1)


@pytest.mark.anyio
async def test_session_policy_keeps_nothing_across_runtimes(tmp_path: Path) -> None:
    config = _config(tmp_path, "session")
    first = await _run(config, Remember("Ivo keeps the lighthouse."), Recall("lighthouse"))
    assert first[1] == (["Ivo keeps the lighthouse."], 1, 1)
    assert (await _run(config, Recall("lighthouse")))[0] == ([], 0, 0)
    assert [p async for p in anyio.Path(tmp_path).rglob("*.json")] == []


@pytest.mark.anyio
async def test_single_run_clears_at_the_end_of_a_run(tmp_path: Path) -> None:
    config = _config(tmp_path, "session", per_agent={"ada": "single_run"})
    assert config.policy_for("ada") == "single_run" and config.policy_for("bob") == "session"
    results = await _run(config, Remember("Ivo keeps the lighthouse."), EndRun(), Recall("Ivo"))
    assert results[2] == ([], 0, 0)


@pytest.mark.anyio
async def test_a_corrupt_session_file_gives_a_clear_error_and_is_kept(tmp_path: Path) -> None:
    config = _config(tmp_path, "persistent")
    path = config.store().path_for("ada")
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"schema": "actormem.session", "version": 1, "comp')
    with pytest.raises(HandlerError, match=r"corrupt session file \(not valid JSON"):
        await _run(config, Recall("x"))
    assert path.read_bytes().endswith(b'"comp')  # untouched


def test_store_errors_name_the_file_and_the_problem(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    path = store.path_for("ada")
    path.parent.mkdir(parents=True)
    cases = {
        b"[1, 2]": "not an actormem session file",
        b'{"schema": "actormem.session", "version": 99}': "newer actormem (schema version 99",
        b'{"schema": "actormem.session", "version": 1}': "missing required field",
        b'{"schema": "actormem.session", "version": 1, "session_id": "default", "agent": "bob",'
        b' "saved_at": "x", "components": {}}': "holds agent 'bob'",
    }
    for raw, reason in cases.items():
        path.write_bytes(raw)
        with pytest.raises(SessionFileError, match=re.escape(reason)) as info:
            store.load("ada")
        assert str(path) in str(info.value)
    assert store.load("nobody") is None


def saved_over_corrupt(tmp_path: Path) -> tuple[SessionStore, Path]:
    """A store whose file for ada was corrupt when it was saved again."""
    store = SessionStore(tmp_path)
    path = store.path_for("ada")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"garbage")
    with pytest.raises(SessionFileError):
        store.load("ada")
    store.save("ada", {"longterm": LongTermState()})
    return store, path


def test_saving_over_a_corrupt_file_moves_it_aside_first(tmp_path: Path) -> None:
    store, path = saved_over_corrupt(tmp_path)
    aside = list(path.parent.glob("ada.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == b"garbage"
    assert store.load("ada") == {"longterm": {"version": 1, "entries": [], "accessed": {}}}
    assert not list(path.parent.glob("*.tmp"))


def test_erasing_an_agent_deletes_its_file_and_the_copies_set_aside(tmp_path: Path) -> None:
    store, path = saved_over_corrupt(tmp_path)
    store.save("adam", {"longterm": LongTermState()})
    assert store.erase("ada") == 2
    assert [p.name for p in path.parent.iterdir()] == ["adam.json"]
    assert store.erase("ada") == 0


def test_a_bad_component_state_is_a_clear_error(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.save("ada", {"longterm": {"version": 1, "entries": [{"id": 3}]}})
    memory = LongTermMemory()
    retention = AgentRetention("ada", "persistent", store, {"longterm": memory})
    with pytest.raises(SessionFileError, match="component 'longterm'"):
        anyio.run(retention.restore)


#: A session file as version 1 of the format has it (the parts' states as JSON).
SESSION_V1 = b"""{
  "schema": "actormem.session", "version": 1, "session_id": "default", "agent": "ada",
  "saved_at": "2026-11-21T15:00:00Z",
  "components": {
    "longterm": {"version": 1, "accessed": {"e1": 1700000000.0},
      "entries": [{"id": "e1", "text": "The lighthouse keeper is called Ivo.",
                   "importance": 0.9, "created": 1700000000.0, "speaker": "user",
                   "source_message_ids": ["m1"]}]},
    "insights": {"version": 1, "insights": [{"id": "i1", "text": "the lamp is lit",
      "topic": "t", "importance": 0.5, "source": "bob", "created": 1700000000.0}]}
  }
}"""


def test_a_saved_session_file_is_read_and_written_back_the_same(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    path = store.path_for("ada")
    path.parent.mkdir(parents=True)
    path.write_bytes(SESSION_V1)
    longterm, inbox = LongTermMemory(), InsightInbox()
    retention = AgentRetention(
        "ada", "persistent", store, {"longterm": longterm, "insights": inbox}
    )
    assert anyio.run(retention.restore)
    assert [e.text for e in longterm.entries()] == ["The lighthouse keeper is called Ivo."]
    assert [i.source for i in inbox] == ["bob"]
    anyio.run(retention.save)
    assert json.loads(path.read_bytes())["components"] == {
        "longterm": json.loads(msgspec.json.encode(longterm.export_state())),
        "insights": json.loads(msgspec.json.encode(inbox.export_state())),
    }


def test_one_bad_part_loads_no_part(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    store.save(
        "ada",
        {
            "insights": msgspec.json.decode(SESSION_V1)["components"]["insights"],
            "longterm": {"version": 1, "entries": [{"id": 3}]},
        },
    )
    longterm, inbox = LongTermMemory(), InsightInbox()
    retention = AgentRetention(
        "ada", "persistent", store, {"insights": inbox, "longterm": longterm}
    )
    with pytest.raises(SessionFileError, match="component 'longterm'"):
        anyio.run(retention.restore)
    assert len(inbox) == 0 and len(longterm) == 0


def test_agent_names_cannot_escape_the_directory(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    path = store.path_for("../../etc/passwd")
    assert path.parent == tmp_path / "default"
    with pytest.raises(SessionFileError, match="agent name"):
        store.path_for("")


def test_config_rejects_unknown_policies() -> None:
    with pytest.raises(ConfigError, match="policy"):
        decode_config({"policy": "forever"}, RetentionConfig, source="t.toml")
    with pytest.raises(ValueError, match="persistent policy needs"):
        AgentRetention("a", "persistent", None, {})
