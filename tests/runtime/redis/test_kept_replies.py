"""The reply to an ask survives its worker: it is stored with the command's effect,
and the ask, sent again unchanged while no reply comes, is answered with it.

A lost reply is made here by dropping what a worker's reply writer is handed, and
keeping it out of the commit call (the reply of a worker that died after its
commit, in a commit that could not write it, never leaves it either); the
SIGKILL storms of asks are in tests/faults/test_lost_replies.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from actormem.actors import MemoryRuntime
from actormem.actors.config import AppConfig
from actormem.actors.memory.commands import Add as AddMessages
from actormem.runtime import AskTimeoutError, Runtime, RuntimeConfig, new_id
from actormem.runtime._envelope import Envelope
from actormem.runtime.redis import Keys, RedisConfig, RedisTransport, shard_of
from actormem.runtime.transports.local import LocalTransport
from tests.runtime.redis.test_transport import worker
from tests.support.actors import Add, GetState, register
from tests.support.streams import client_runtime, eventually

pytestmark = pytest.mark.anyio


def drop_replies(rt: Runtime, lost: Callable[[Any], bool], *, kept_too: bool = False) -> list[Any]:
    """Make ``rt``'s worker lose the replies to the commands ``lost`` picks (as if it
    died before sending them), and with ``kept_too`` never answer their copies
    either (as if it died then); returns those commands."""
    replies = rt.transport._replies  # type: ignore[attr-defined]
    send, answer_again, stream_of = replies.send, replies.answer_again, replies.stream_of
    dropped: list[Any] = []
    # Whether each envelope's reply is lost, asked of ``lost`` once (the envelope is
    # held, so that its id is not reused).
    decided: dict[int, tuple[Any, bool]] = {}

    def is_lost(envelope: Any) -> bool:
        if id(envelope) not in decided:
            decided[id(envelope)] = (envelope, lost(envelope.body))
        return decided[id(envelope)][1]

    def sent_after_commit(envelope: Any) -> str | None:
        # Not written by the commit call: handed to the reply writer, which drops it.
        return None if is_lost(envelope) else stream_of(envelope)

    async def silent(envelope: Any, key: str) -> bool:
        return False if is_lost(envelope) else bool(await answer_again(envelope, key))

    async def lossy(batch: list[tuple[Any, Any, bytes | None]]) -> None:
        kept = []
        for item in batch:
            if is_lost(item[0]):
                dropped.append(item[0].body)
            else:
                kept.append(item)
        await send(kept)

    replies.send = lossy
    replies.stream_of = sent_after_commit
    if kept_too:
        replies.answer_again = silent
    return dropped


def kept_reply_key(config: RedisConfig, address: str, command: str) -> str:
    return Keys(config.prefix).reply(shard_of(address, config.shards), address, command)


async def test_an_ask_whose_reply_was_lost_is_answered_with_the_reply_kept_with_its_effect(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with worker(redis_client, redis_config) as rt, client_runtime(redis_config) as asker:
        dropped = drop_replies(rt, lambda body: body == Add("first", amount=5))
        ledger = asker.ref("ledger/kept")
        # Answered by the copy the asker sent when no reply came: the reply the
        # commit kept (5), not a second application (which would answer 10).
        assert await ledger.ask(Add("first", amount=5), timeout=20) == 5
        assert dropped == [Add("first", amount=5)]
        assert (await ledger.ask(GetState())).tokens == ["first"]
        assert asker.transport.stats().asks_resent >= 1  # type: ignore[attr-defined]
        assert rt.transport.stats().answered_again >= 1  # type: ignore[attr-defined]
    # Kept under the actor's shard, named by the command id, until the ask's
    # deadline (20 s) and a second more.
    keys = [k async for k in redis_client.scan_iter(match=f"{redis_config.prefix}:*:reply:*")]
    assert len(keys) == 1
    assert 0 < await redis_client.pttl(keys[0]) <= 21_000 < redis_config.reply_ttl_ms


async def test_an_ask_applied_by_a_worker_that_left_before_replying_is_answered_by_the_next_owner(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    answers: list[int] = []

    async def answered() -> bool:
        return bool(answers)

    async with client_runtime(redis_config) as asker, anyio.create_task_group() as tg:
        ledger = asker.ref("ledger/handed")

        async def ask() -> None:
            answers.append(await ledger.ask(Add("once", amount=7), timeout=30))

        async with worker(redis_client, redis_config) as first:
            dropped = drop_replies(first, lambda body: isinstance(body, Add), kept_too=True)
            tg.start_soon(ask)

            async def applied() -> bool:
                return bool(dropped)

            await eventually(applied, "the first worker applied the add and lost its reply")
        # The worker left without a reply going out; the shard's next owner answers
        # the copy the asker sends.
        async with worker(redis_client, redis_config) as second:
            await eventually(answered, "the asker got its reply")
            assert second.transport.stats().answered_again >= 1  # type: ignore[attr-defined]
            assert (await second.ref("ledger/handed").ask(GetState())).tokens == ["once"]
    assert answers == [7]


async def test_a_tell_keeps_no_reply(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    async with worker(redis_client, redis_config) as rt:
        await rt.ref("ledger/told").tell(Add("told"))

        async def stored() -> bool:
            return (await rt.ref("ledger/told").ask(GetState())).tokens == ["told"]

        await eventually(stored, "the tell applied")
    keys = [k async for k in redis_client.scan_iter(match=f"{redis_config.prefix}:*:reply:*")]
    assert keys == []


async def test_a_copy_of_an_ask_answered_here_already_is_not_answered_again(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    """A copy of an ask this transport made and has its reply to (one handed over,
    say) is skipped without reading the kept reply: nobody waits for it."""
    async with worker(redis_client, redis_config) as rt:
        await rt.ref("ledger/kept").ask(Add("kept"))
        replies = rt.transport._replies  # type: ignore[attr-defined]
        key = kept_reply_key(redis_config, "ledger/kept", "c1")
        await redis_client.set(key, b"a reply kept with its command")
        copy = Envelope(
            recipient="ledger/kept", body=Add("kept"), id="c1", correlation=10**9, resent=True
        )
        copy.reply_to = replies.stream
        assert not await replies.answer_again(copy, key)


async def test_in_process_an_ask_is_sent_once_and_a_slow_command_applied_once() -> None:
    # Nothing is lost in process: an ask that times out is not sent again, so a
    # slow command is applied once (after its asker gave up).
    async with Runtime(RuntimeConfig(), transport=LocalTransport()) as rt:
        register(rt)
        ledger = rt.ref("ledger/slow")
        with pytest.raises(AskTimeoutError) as caught:
            await ledger.ask(Add("slow", delay=0.5), timeout=0.1)
        assert "sent" not in str(caught.value)
        assert (await ledger.ask(GetState(), timeout=10)).tokens == ["slow"]
        assert rt._asks.resent == 0


async def test_a_memory_add_whose_reply_was_lost_stores_its_messages_once_with_the_same_ids(
    redis_config: RedisConfig,
) -> None:
    transport = RedisTransport(redis_config.url, redis_config)
    async with MemoryRuntime(AppConfig(), transport=transport) as rt:
        dropped = drop_replies(rt, lambda body: isinstance(body, AddMessages))
        memory = rt.memory("amy")
        result = await memory.add([{"role": "user", "content": "the vault code is 4711"}])
        assert len(dropped) == 1
        sent = dropped[0].messages
        # The ids were fixed in the command when the handle built it: the retry
        # carried the same ones, and its answer is the first application's.
        assert result.ids == [m.id for m in sent]
        history = await memory.get(scope="history")
        assert [m.id for m in history] == result.ids
        assert transport.stats().answered_again >= 1


async def test_a_copy_of_a_command_is_never_handled(
    redis_client: aioredis.Redis, redis_config: RedisConfig
) -> None:
    # A copy comes after its first one, which was handled, is in flight, or was
    # given up (dead-lettered: a pill that kills its worker must not run again). A
    # copy whose first one was never seen is skipped too.
    with capture_logs() as logs:
        async with worker(redis_client, redis_config), client_runtime(redis_config) as asker:
            ledger = asker.ref("ledger/copied")
            copy = Envelope(recipient="ledger/copied", body=Add("copy"), id=new_id())
            await asker.transport.resend(copy)  # type: ignore[attr-defined]
            await ledger.tell(Add("after"))  # the same stream, behind the copy

            async def after() -> bool:
                return bool((await ledger.ask(GetState())).tokens)

            await eventually(after, "the tell behind the copy applied")
            assert (await ledger.ask(GetState())).tokens == ["after"]
    # By its id: the copies of the GetState asks, sent again if a reply is slow,
    # are skipped too.
    skipped = [e["msg_id"] for e in logs if e["event"] == "duplicate_skipped"]
    assert skipped.count(copy.id) == 1


async def test_an_unanswered_ask_is_resent_until_its_timeout_and_no_more(
    redis_config: RedisConfig,
) -> None:
    # No worker (and no early NoOwnerError): every copy waits in the stream.
    config = redis_config.replace(no_owner_timeout=0.0)
    async with client_runtime(config) as asker:
        with pytest.raises(AskTimeoutError, match=r"within 2s \(sent \d+ times\)"):
            await asker.ref("ledger/nobody").ask(Add("lonely"), timeout=2)
        resent = asker.transport.stats().asks_resent  # type: ignore[attr-defined]
        assert resent >= 1
        await anyio.sleep(1.0)  # two more resend periods (lease_ms / 2 = 0.5 s)
        assert asker.transport.stats().asks_resent == resent  # type: ignore[attr-defined]
