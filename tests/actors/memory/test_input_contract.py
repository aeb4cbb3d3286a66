"""The memory's input contract: every bad argument is refused with MemoryInputError
naming it, on both transports, and changes nothing stored."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actormem.actors import (
    MemoryInputError,
    MemoryRuntime,
    Message,
    ToolCall,
    check_openai_messages,
)
from actormem.actors.config import AppConfig, MemoryConfig
from actormem.actors.memory.commands import (
    Add,
    Clear,
    Context,
    Delete,
    Export,
    Get,
    HeldInsights,
    MemoryExport,
    Prune,
    RecallEpisode,
    Record,
    Reload,
    Retrieve,
    Search,
    SetSummary,
    StartEpisode,
    ToPool,
    Update,
)
from actormem.actors.memory.handle import MemoryHandle
from actormem.actors.messages import ROLES
from actormem.actors.pool.commands import QueryInsights, Share, Subscribe
from actormem.runtime import LocalTransport
from actormem.runtime.redis import RedisConfig, RedisTransport
from tests.actors.memory.spies import spy_on_counting
from tests.actors.memory.test_memory import chat
from tests.support import examples
from tests.support.redis import prefixed_client

pytestmark = pytest.mark.anyio


def stored(export: MemoryExport) -> tuple[Any, ...]:
    """What an export holds, without the time it was made."""
    return (export.working, export.history, export.offloaded)


async def filled(rt: MemoryRuntime) -> tuple[MemoryHandle, tuple[Any, ...]]:
    alice = rt.memory("alice")
    await alice.add(chat())
    return alice, stored(await alice.export())


async def misrefused(
    alice: MemoryHandle,
    before: tuple[Any, ...],
    calls: Iterable[tuple[str, Callable[[], Awaitable[Any]], str]],
) -> list[str]:
    """Run each named call; list those not refused with an error matching their
    pattern, and stop at one that changed what ``alice`` stores."""
    wrong = []
    for name, call, match in calls:
        try:
            await call()
        except MemoryInputError as exc:
            if not re.search(match, str(exc)):
                wrong.append(f"{name}: {exc}")
        else:
            wrong.append(f"{name}: not refused")
        if stored(await alice.export()) != before:
            wrong.append(f"{name}: changed what is stored")
            break
    return wrong


def dead_lettered(rt: MemoryRuntime) -> int:
    transport = rt.transport
    return transport.stats().dead_lettered if isinstance(transport, RedisTransport) else 0


# -- the calls a new user gets wrong ------------------------------------------------------


BAD_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
    ("add", (None,), {}, "add: messages must be"),
    ("add", (42,), {}, "add: messages must be"),
    ("add", ("hello",), {}, "add: messages must be"),
    ("add", ({"role": "user", "content": "x", "timestamp": "yesterday"},), {}, "timestamp"),
    ("add", ({"role": "user", "content": "x", "timestamp": math.nan},), {}, "timestamp"),
    ("add", ({"role": "user", "content": "x", "timestamp": math.inf},), {}, "timestamp"),
    ("add", ({"role": "user", "content": "x", "name": 42},), {}, "name"),
    ("add", ({"role": "user", "content": ["a", "b"]},), {}, "content part 0"),
    ("add", ({"role": "user", "content": []},), {}, "at least one content part"),
    ("add", ({"role": "user", "content": "x", "metadata": {"a": object()}},), {}, "metadata"),
    ("add", ({"role": "user", "content": "x", "metadata": {"n": 2**70}},), {}, "metadata"),
    ("get", (), {"metadata": {"n": 2**70}}, "get: metadata must be JSON-able"),
    ("context", ("100",), {}, "context: max_tokens must be an int"),
    ("context", (True,), {}, "context: max_tokens must be an int"),
    ("context", (), {"query": 3}, "context: query must be a string"),
    ("prune", ("10",), {}, "prune: max_tokens must be an int"),
    ("prune", (10,), {"preserve_system": "yes"}, "prune: preserve_system must be True or False"),
    ("recent", ("2",), {}, "recent: n must be an int"),
    ("recent", (-1,), {}, "recent: n must be an int >= 0"),
    ("search", (None,), {}, "search: query must be a non-empty string"),
    ("search", ("x",), {"k": 0}, "search: k must be an int >= 1"),
    ("search", ("x",), {"roles": "user"}, "search: roles must be"),
    ("get", (), {"since": "yesterday"}, "get: since must be a finite time"),
    ("get", (), {"until": math.nan}, "get: until must be a finite time"),
    ("get", (), {"names": "bob"}, "get: names must be a list of strings"),
    ("get", (), {"important": "no"}, "get: important must be True or False"),
    ("get", (), {"scope": "all"}, "get: scope must be one of"),
    ("clear", (), {"history": "no"}, "clear: history must be True or False"),
    ("export", (), {"include_history": 1}, "export: include_history must be True or False"),
    ("delete", (1.5,), {}, "delete: targets are message ids"),
    ("delete", (True,), {}, "delete: targets are message ids"),
    ("held_insights", (), {"k": "3"}, "held_insights: k must be an int"),
    ("retrieve", (None,), {}, "retrieve: query must be a string"),
    ("recall_episode", ("x",), {"k": -1}, "recall_episode: k must be an int >= 1"),
    ("reload", (7,), {}, "reload: offload_id must be a string"),
    ("share", ("tip",), {"importance": math.nan}, "share: importance must be a number"),
    ("share", ("",), {}, "share: insight must be a non-empty string"),
    ("share", ("tip",), {"source_message_ids": "m1"}, "share: source_message_ids must be"),
    ("export", (42,), {}, "export: path must be"),
    ("register_fact", ("f",), {"importance": 2}, "register_fact: importance must be"),
    ("subscribe", (3,), {}, "subscribe: topics must be"),
    ("insights", (), {"k": 0}, "insights: k must be an int >= 1"),
    ("load", (42,), {}, "load: messages must be"),
    ("record", (None,), {}, "record: messages must be"),
    ("answer_tool_call", ({"id": "", "name": "x"},), {}, "non-empty id and name"),
    ("answer_tool_call", ("call",), {}, "call must be a ToolCall or a dict"),
    ("update", ("nope",), {"content": "x"}, "update: no message with id 'nope'"),
    ("update", (42,), {"content": "x"}, "update: id must be a non-empty string"),
    ("update", ("m",), {"importance": math.nan}, "update: importance must be a number"),
    ("update", ("m",), {"content": 42}, "update: content must be"),
    ("update", ("m",), {"metadata": {"a": object()}}, "update: metadata must be JSON-able"),
    ("update", ("m",), {}, "update: nothing to change"),
    ("mark", ("m",), {"x": object()}, "update: set_metadata must be JSON-able"),
    ("unmark", ("m", 3), {}, "update: remove_metadata must be a list of strings"),
    ("set_summary", ("",), {"replaces": ["m"]}, "set_summary: text must be a non-empty string"),
    ("set_summary", ("s",), {"replaces": "m"}, "set_summary: replaces must be a list of strings"),
    ("set_summary", ("s",), {"replaces": []}, "set_summary: replaces must be a non-empty list"),
    ("set_summary", ("s",), {"replaces": ["nope"]}, "set_summary: no message with id 'nope'"),
]


async def test_each_bad_argument_is_refused_by_name_and_changes_nothing(
    memory_rt: MemoryRuntime,
) -> None:
    # One runtime for every call (a runtime per call costs a Redis worker start
    # each): a call that is not refused as expected is listed, and the rest still run.
    alice, before = await filled(memory_rt)
    wrong = await misrefused(
        alice,
        before,
        (
            (f"{method}-{i}", functools.partial(getattr(alice, method), *args, **kwargs), match)
            for i, (method, args, kwargs, match) in enumerate(BAD_CALLS)
        ),
    )
    assert not wrong, "\n".join(wrong)
    assert dead_lettered(memory_rt) == 0


async def test_many_bad_calls_never_stop_the_agent(memory_rt: MemoryRuntime) -> None:
    alice, before = await filled(memory_rt)
    for _ in range(3):
        for method, args, kwargs, _match in BAD_CALLS:
            with pytest.raises(MemoryInputError):
                await getattr(alice, method)(*args, **kwargs)
    assert [m.id for m in await alice.get()] == [m.id for m in before[0]]
    assert stored(await alice.export()) == before
    assert (await memory_rt.memory("bob").stats()).size == 0
    stats = memory_rt.stats()
    assert (stats.failures, stats.restarts) == (0, 0)


# -- commands from any client (the handle bypassed) --------------------------------------


RAW_COMMANDS = [
    (Context(max_tokens="100"), "max_tokens"),  # type: ignore[arg-type]
    (Prune(max_tokens=True), "max_tokens"),  # type: ignore[arg-type]
    (Clear(history="no"), "history"),  # type: ignore[arg-type]
    (Get(since=math.nan), "since"),
    (Get(recent_n=-3), "recent_n"),
    (Search(query="x", mode="fuzzy"), "mode"),  # type: ignore[arg-type]
    (ToPool(command=Subscribe(agent="alice", backfill=-1)), "backfill"),
    (ToPool(command=Share(text="  ", source="alice")), "insight"),
]


async def test_a_bad_command_from_any_client_is_answered_not_dead_lettered(
    memory_rt: MemoryRuntime,
) -> None:
    # One runtime for the whole table, as for the bad calls above.
    alice, before = await filled(memory_rt)
    wrong = await misrefused(
        alice,
        before,
        (
            (f"{type(c).__name__}-{i}", functools.partial(memory_rt.ask, alice.address, c), f)
            for i, (c, f) in enumerate(RAW_COMMANDS)
        ),
    )
    assert not wrong, "\n".join(wrong)
    assert dead_lettered(memory_rt) == 0


# -- what gets in -------------------------------------------------------------------------


def small_config() -> AppConfig:
    return AppConfig(memory=MemoryConfig(max_message_chars=100))


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "x" * 101},
        {"role": "user", "content": "x", "name": "n" * 101},
        {"role": "user", "content": "x", "metadata": {"note": "m" * 100}},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "name": "f", "arguments": '"' + "a" * 100 + '"'}],
        },
    ],
    ids=["content", "name", "metadata", "tool-arguments"],
)
async def test_the_size_limit_covers_the_whole_message(
    make_transport: Any, message: dict[str, Any]
) -> None:
    async with MemoryRuntime(small_config(), transport=make_transport()) as rt:
        alice = rt.memory("alice")
        with pytest.raises(MemoryInputError, match="the limit is 100"):
            await alice.add(message)
        assert (await alice.stats()).history_size == 0


async def test_a_message_too_big_for_the_transport_is_the_callers_input_error(
    redis_config: RedisConfig,
) -> None:
    # Within the memory's own limit, but over what the Redis transport carries.
    config = msgspec.structs.replace(redis_config, max_message_bytes=2_000)
    transport = RedisTransport(config.url, config)
    async with prefixed_client(config), MemoryRuntime(AppConfig(), transport=transport) as rt:
        alice = rt.memory("alice")
        await alice.add({"role": "user", "content": "kept"})
        with pytest.raises(MemoryInputError, match="max_message_bytes=2000"):
            await alice.add({"role": "user", "content": "x" * 5_000})
        assert [m.content for m in await alice.get()] == ["kept"]


def test_tool_call_checks_are_the_same_on_both_routes() -> None:
    typed = ToolCall("c1", "f", {"a": 1})  # type: ignore[arg-type]
    assert typed.arguments == '{"a":1}'
    from actormem.actors.memory.handle import to_message

    via_dict = to_message(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
            ],
        }
    )
    assert via_dict.tool_calls == (typed,)
    with pytest.raises(MemoryInputError, match="arguments must be a JSON string"):
        ToolCall("c1", "f", 3)  # type: ignore[arg-type]


#: Messages refused on every route in, with what the error names.
REFUSED_MESSAGES: list[tuple[Any, str]] = [
    (Message(role="assistant", tool_calls=(ToolCall("", "f"),)), "non-empty id"),
    (Message(role="assistant", tool_calls=(ToolCall("c", ""),)), "non-empty function name"),
    (Message(role="assistant", tool_calls=(ToolCall("c", "f", "{oops"),)), "JSON string"),
    (
        {"role": "assistant", "tool_calls": [{"id": "", "function": {"name": "f"}}]},
        "non-empty id",
    ),
    ({"role": "assistant", "tool_calls": [{"id": "c", "name": ""}]}, "function name"),
    (
        Message(
            role="agent_response",
            content=[{"type": "image_url", "image_url": {"url": "http://x/y.png"}}],
        ),
        "cannot carry 'image_url'",
    ),
    (Message(role="user", content=[{"type": "text"}]), "needs 'text'"),
    (Message(role="user", content=[{"type": "image_url", "image_url": {}}]), "url"),
    (Message(role="user", content="x", timestamp=-5.0), "timestamp"),
]


async def test_what_gets_in_is_valid(memory_rt: MemoryRuntime) -> None:
    # One runtime for the whole table: each message is refused by add, load and record.
    alice, before = await filled(memory_rt)
    wrong = await misrefused(
        alice,
        before,
        (
            (f"{i} by {route.__name__}", functools.partial(route, arg), match)
            for i, (message, match) in enumerate(REFUSED_MESSAGES)
            for route, arg in (
                (alice.add, message),
                (alice.load, [message]),
                (alice.record, message),
            )
        ),
    )
    assert not wrong, "\n".join(wrong)


def test_parts_a_role_cannot_carry_are_sent_as_text() -> None:
    image = {"type": "image_url", "image_url": {"url": "http://x/y.png"}}
    # Built without the checks, as a message stored before them may be.
    old = msgspec.convert(
        {"role": "agent_response", "content": [{"type": "text", "text": "look"}, image]},
        Message,
    )
    assert old.to_openai() == {"role": "assistant", "content": "look"}
    call = Message(role="agent_call", name="bob", content=[{"type": "text", "text": "see"}, image])
    sent = call.to_openai()
    assert sent["role"] == "user"
    assert sent["content"][0] == {"type": "text", "text": "[Request from bob]: "}
    assert sent["content"][2] == image


async def test_a_refused_timestamp_never_hurts_later_calls(memory_rt: MemoryRuntime) -> None:
    alice, _ = await filled(memory_rt)
    for bad in ("yesterday", math.nan, math.inf, -1.0, 1e300):
        with pytest.raises(MemoryInputError, match="timestamp"):
            await alice.add({"role": "user", "content": "x", "timestamp": bad})
    for _ in range(5):
        assert len(await alice.get(since=0)) == len(chat())
    exported = await alice.export()
    alice2 = memory_rt.memory("alice2")
    assert await alice2.load(exported, overwrite=True) == len(chat())


async def test_the_size_limit_is_checked_before_tokens_are_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from actormem.actors.memory import exchange, store

    counted = spy_on_counting(monkeypatch, exchange, store)
    async with MemoryRuntime(small_config(), transport=LocalTransport()) as rt:
        with pytest.raises(MemoryInputError, match="the limit is 100"):
            await rt.memory("alice").add(
                [{"role": "user", "content": "ok"}, {"role": "user", "content": "x" * 10_000}]
            )
    assert counted == []


# -- random wrong arguments ---------------------------------------------------------------

# The fixture's runtime serves every example: what one example refuses, the next finds unchanged.
RANDOM_CALLS = settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(object),
)
_NOT_BOOL = _JUNK.filter(lambda v: type(v) is not bool)
_NOT_STR = _JUNK.filter(lambda v: not isinstance(v, str))
_NOT_TEXT = _JUNK.filter(lambda v: not isinstance(v, str) or not v.strip())
_NOT_OPTIONAL_STR = _NOT_STR.filter(lambda v: v is not None)


def _bad_int(minimum: int, optional: bool = False) -> st.SearchStrategy[Any]:
    def invalid(v: Any) -> bool:
        if optional and v is None:
            return False
        return not (type(v) is int and minimum <= v < 2**63)

    return _JUNK.filter(invalid)


_BAD_ROLES = st.one_of(
    st.text(max_size=5),
    st.integers(),
    st.lists(st.text(max_size=5).filter(lambda r: r not in ROLES), min_size=1, max_size=2),
)
_BAD_TIMES = st.one_of(
    st.text(max_size=5),
    st.booleans(),
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.lists(st.integers(), max_size=1),
)
_BAD_MESSAGE = st.one_of(
    _JUNK.filter(lambda v: not isinstance(v, dict | list)),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=3)), min_size=1, max_size=2),
    st.fixed_dictionaries({"role": st.text(max_size=6).filter(lambda r: r not in ROLES)}),
    st.fixed_dictionaries(
        {"role": st.just("user"), "content": st.just("x"), "timestamp": _BAD_TIMES}
    ),
    st.fixed_dictionaries(
        {"role": st.just("user"), "content": st.just("x"), "timestamp": st.floats(max_value=-0.1)}
    ),
    st.fixed_dictionaries(
        {"role": st.just("user"), "content": st.just("x"), "name": _NOT_OPTIONAL_STR}
    ),
    st.fixed_dictionaries({"role": st.just("user"), "content": st.lists(_JUNK, max_size=2)}),
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.just("x"),
            "metadata": st.builds(lambda: {"o": object()}),
        }
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {"id": st.just(""), "name": st.text(max_size=3), "arguments": st.just("{}")}
                ),
                min_size=1,
                max_size=1,
            ),
        }
    ),
)


def _is_fraction(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1


def _call(method: str, *args: st.SearchStrategy[Any], **kwargs: st.SearchStrategy[Any]) -> Any:
    return st.tuples(st.just(method), st.tuples(*args), st.fixed_dictionaries(kwargs))


BAD_ARGUMENTS = st.one_of(
    _call("add", _BAD_MESSAGE),
    _call("record", _BAD_MESSAGE),
    _call("load", _BAD_MESSAGE.filter(lambda v: not isinstance(v, str | bytes))),
    _call("delete", _JUNK.filter(lambda v: not isinstance(v, str | int) or isinstance(v, bool))),
    _call("delete", st.integers(100, 2**40)),
    _call("delete", st.text(min_size=1, max_size=5)),
    _call("clear", history=_NOT_BOOL),
    _call("prune", _bad_int(1)),
    _call("prune", st.integers(1, 10**6), preserve_system=_NOT_BOOL),
    _call("context", _bad_int(1, optional=True)),
    _call("context", query=_NOT_OPTIONAL_STR.filter(lambda v: v is not None)),
    _call("get", recent_n=_bad_int(0, optional=True)),
    _call("get", roles=_BAD_ROLES),
    _call("get", names=st.one_of(st.text(max_size=3), st.lists(st.integers(), min_size=1))),
    _call("get", metadata=st.one_of(st.text(max_size=3), st.integers(), st.lists(st.integers()))),
    _call("get", since=_BAD_TIMES),
    _call("get", until=_BAD_TIMES),
    _call("get", important=_NOT_BOOL),
    _call("get", scope=_JUNK.filter(lambda v: v not in ("working", "history", "offloaded"))),
    _call("recent", _bad_int(0)),
    _call("by_role", _JUNK.filter(lambda v: not (isinstance(v, str) and v in ROLES))),
    _call("search", _NOT_TEXT),
    _call("search", st.just("x"), mode=_JUNK.filter(lambda v: v not in ("substring", "ranked"))),
    _call("search", st.just("x"), k=_bad_int(1, optional=True)),
    _call("search", st.just("x"), roles=_BAD_ROLES),
    _call("export", include_history=_NOT_BOOL),
    _call("retrieve", _NOT_STR),
    _call("retrieve", st.just("x"), _bad_int(1, optional=True)),
    _call("recall_episode", _NOT_STR),
    _call("recall_episode", st.just("x"), _bad_int(1)),
    _call("held_insights", _NOT_OPTIONAL_STR.filter(lambda v: v is not None)),
    _call("held_insights", st.none(), _bad_int(1)),
    _call("reload", _NOT_STR),
    _call("reload", st.text(max_size=5)),
    _call("insights", _NOT_TEXT),
    _call("insights", st.just("*"), _bad_int(1)),
    _call("share", _NOT_TEXT),
    _call("share", st.just("tip"), _NOT_TEXT),
    _call(
        "share",
        st.just("tip"),
        st.just("t"),
        _JUNK.filter(
            lambda v: not (isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1)
        ),
    ),
    _call("register_fact", _NOT_TEXT),
    _call("subscribe", _NOT_TEXT),
    _call("unsubscribe", _NOT_TEXT),
    _call("answer_tool_call", _JUNK.filter(lambda v: not isinstance(v, dict))),
    _call("start_episode", note=st.builds(object)),
    _call("update", _NOT_TEXT, content=st.just("x")),
    _call("update", st.text(max_size=5), content=st.just("x")),
    _call(
        "update",
        st.just("x"),
        importance=_JUNK.filter(lambda v: not (v is None or _is_fraction(v))),
    ),
    _call(
        "update",
        st.just("x"),
        content=_JUNK.filter(lambda v: v is not None and not isinstance(v, str | dict | list)),
    ),
    _call("update", st.just("x"), metadata=_JUNK.filter(lambda v: not isinstance(v, dict))),
    _call("mark", _NOT_TEXT, seen=st.just(True)),
    _call("mark", st.text(max_size=5), seen=st.just(True)),
    _call("unmark", st.just("x"), _NOT_STR),
    _call("set_summary", _NOT_TEXT, replaces=st.just(["x"])),
    _call("set_summary", st.just("s"), replaces=_JUNK.filter(lambda v: not isinstance(v, list))),
    _call("set_summary", st.just("s"), replaces=st.lists(st.text(max_size=5), max_size=3)),
)


@RANDOM_CALLS
@given(calls=st.lists(BAD_ARGUMENTS, min_size=1, max_size=6))
async def test_random_wrong_arguments_are_refused_and_change_nothing(
    memory_rt: MemoryRuntime, calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]
) -> None:
    alice = memory_rt.memory("alice")
    if not (await alice.stats()).size:
        await alice.add(chat())
    before = stored(await alice.export())
    for method, args, kwargs in calls:
        with pytest.raises(MemoryInputError):
            await getattr(alice, method)(*args, **kwargs)
    assert (await alice.stats()).size == len(chat())
    assert stored(await alice.export()) == before
    assert dead_lettered(memory_rt) == 0


async def test_a_session_file_stored_before_a_rule_still_loads(tmp_path: Any) -> None:
    from actormem.actors.retention import RetentionConfig

    config = AppConfig(
        retention=RetentionConfig(per_agent={"keeper": "persistent"}, session_dir=str(tmp_path))
    )
    async with MemoryRuntime(config) as rt:
        await rt.memory("keeper").add({"role": "user", "content": "The key is under the stone."})
    (path,) = [p for p in tmp_path.rglob("*.json")]
    text = path.read_text()
    # A timestamp the rules refuse today, as an older version may have stored it.
    old = re.sub(r'"timestamp":\s*[0-9.e+]+', '"timestamp":-5.0', text)
    assert old != text
    path.write_text(old)
    async with MemoryRuntime(config) as rt:
        keeper = rt.memory("keeper")
        assert (await keeper.stats()).history_size == 1
        assert await keeper.context(200)


# Values any client can put on the wire (msgpack): the handle is bypassed.
_WIRE_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=4),
    st.lists(st.integers(-5, 5), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2),
)


def _wire(valid: Callable[[Any], bool]) -> st.SearchStrategy[Any]:
    return _WIRE_JUNK.filter(lambda v: not valid(v))


def _int_at_least(minimum: int, optional: bool = False) -> Callable[[Any], bool]:
    return lambda v: (optional and v is None) or (type(v) is int and v >= minimum)


def _no_messages(v: Any) -> bool:
    return isinstance(v, list) and not v


def _indices_in_range(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(type(i) is int and -7 <= i < 7 for i in v)


def _is_bool(v: Any) -> bool:
    return type(v) is bool


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _command(cls: type, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(cls, **fields)


RAW_BAD_COMMANDS = st.one_of(
    _command(Add, messages=_wire(_no_messages)),
    _command(Record, messages=_wire(_no_messages)),
    _command(Context, max_tokens=_wire(_int_at_least(1, optional=True))),
    _command(Context, query=_wire(lambda v: v is None or _is_str(v))),
    _command(Prune, max_tokens=_wire(_int_at_least(1))),
    _command(Prune, max_tokens=st.just(10), preserve_system=_wire(_is_bool)),
    _command(Clear, history=_wire(_is_bool)),
    _command(Export, include_history=_wire(_is_bool)),
    _command(Get, recent_n=_wire(_int_at_least(0, optional=True))),
    _command(
        Get, since=_wire(lambda v: v is None or (type(v) in (int, float) and math.isfinite(v)))
    ),
    _command(Get, important=_wire(_is_bool)),
    _command(Get, scope=_wire(lambda v: v in ("working", "history", "offloaded"))),
    _command(Get, names=_wire(lambda v: v is None or (isinstance(v, list) and not v))),
    _command(Search, query=_wire(lambda v: _is_str(v) and bool(v.strip()))),
    _command(Search, query=st.just("x"), k=_wire(_int_at_least(1, optional=True))),
    _command(Search, query=st.just("x"), mode=_wire(lambda v: v in ("substring", "ranked"))),
    _command(Delete, ids=_wire(lambda v: isinstance(v, list) and not v)),
    _command(Delete, indices=_wire(_indices_in_range)),
    _command(Reload, offload_id=_WIRE_JUNK),
    _command(Retrieve, query=_wire(_is_str)),
    _command(RecallEpisode, query=st.just("x"), k=_wire(_int_at_least(1))),
    _command(HeldInsights, k=_wire(_int_at_least(1))),
    _command(StartEpisode, metadata=_wire(lambda v: isinstance(v, dict))),
    _command(Update, id=_wire(lambda v: _is_str(v) and bool(v.strip())), content=st.just("x")),
    _command(Update, id=st.just("nope"), content=st.just("x")),
    _command(
        Update,
        id=st.just("x"),
        importance=_wire(lambda v: v is None or (type(v) in (int, float) and 0 <= v <= 1)),
    ),
    _command(
        Update,
        id=st.just("x"),
        remove_metadata=_wire(lambda v: isinstance(v, list) and all(_is_str(k) for k in v)),
    ),
    _command(
        SetSummary, text=_wire(lambda v: _is_str(v) and bool(v.strip())), replaces=st.just(["x"])
    ),
    _command(SetSummary, text=st.just("s"), replaces=_WIRE_JUNK),
)


@RANDOM_CALLS
@given(commands=st.lists(RAW_BAD_COMMANDS, min_size=1, max_size=6))
async def test_random_bad_commands_from_any_client_are_answered_and_change_nothing(
    memory_rt: MemoryRuntime, commands: list[Any]
) -> None:
    alice = memory_rt.memory("alice")
    if not (await alice.stats()).size:
        await alice.add(chat())
    before = stored(await alice.export())
    for command in commands:
        with pytest.raises(MemoryInputError):
            await memory_rt.ask(alice.address, command)
    assert stored(await alice.export()) == before
    assert memory_rt.stats().failures == 0
    assert dead_lettered(memory_rt) == 0


async def test_context_is_valid_for_every_role_and_content_shape(memory_rt: MemoryRuntime) -> None:
    image = {"type": "image_url", "image_url": {"url": "http://x/y.png"}}
    text = {"type": "text", "text": "hello"}
    alice = memory_rt.memory("alice")
    await alice.add(
        [
            Message(role="system", content=[text]),
            Message(role="user", name="bob smith", content=[text, image]),
            Message(role="assistant", content=[text, {"type": "refusal", "refusal": "no"}]),
            Message(role="agent_call", name="carol", content=[text, image]),
            Message(role="agent_response", content={"answer": 42}),
            Message(role="assistant", tool_calls=(ToolCall("c1", "f", {"a": 1}),)),
            Message(role="tool", tool_call_id="c1", name="f", content=[text]),
            Message(role="user", content="last"),
        ]
    )
    context = await alice.context(4000)
    assert check_openai_messages(context) == []
    assert [m["role"] for m in context] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "assistant",
        "tool",
        "user",
    ]
    assert context[5]["tool_calls"][0]["function"]["arguments"] == '{"a":1}'


def test_an_insight_query_that_is_not_text_is_refused() -> None:
    with pytest.raises(MemoryInputError, match="query must be a string"):
        QueryInsights(query=5)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", ["5", 0, -1.0, math.nan, math.inf, True])
def test_a_handle_timeout_is_a_positive_number(timeout: Any) -> None:
    with pytest.raises(MemoryInputError, match="timeout must be a positive number"):
        MemoryHandle(None, "alice", timeout)  # type: ignore[arg-type]


def test_an_sdk_message_dict_with_null_fields_is_taken() -> None:
    from actormem.actors.memory.handle import to_message

    sdk = {"role": "assistant", "content": "hi", "tool_calls": None, "refusal": None, "name": None}
    assert to_message(sdk).tool_calls == ()
