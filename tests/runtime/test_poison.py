"""Envelopes no actor can take, in process: refused with a clear error, never a crash.

Addresses are checked where a message is sent; an envelope that gets past that
(handed to the runtime's host side directly, as a transport does) is refused by
the dispatcher with an :class:`ActorError`; a factory that raises for an address
refuses that address without counting against any actor. A stopped actor is
deactivated and comes back after its back-off.
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
from structlog.testing import capture_logs

from actormem.runtime import (
    Actor,
    ActorContext,
    ActorError,
    ActorNotFoundError,
    ActorStoppedError,
    HandlerError,
    InvalidAddressError,
    Runtime,
    SupervisionConfig,
)
from actormem.runtime._envelope import Envelope
from actormem.runtime.ids import MAX_ADDRESS_CHARS, split_address
from tests.support.streams import eventually

pytestmark = pytest.mark.anyio

#: Addresses no actor can have, with what the error says about each.
BAD_ADDRESSES: dict[Any, str] = {
    "memory/": "the key (after '/') is empty",
    "memory": "it has no '/'",
    "pool/": "the key (after '/') is empty",
    "/alice": "the kind (before '/') is empty",
    "": "it has no '/'",
    "/": "the kind (before '/') is empty",
    "memory/al\nice": "control characters",
    "memory/" + "a" * MAX_ADDRESS_CHARS: f"over {MAX_ADDRESS_CHARS}",
    None: "not a string",
    42: "not a string",
}


class Store(Actor):
    """Keeps what it is told in a class-level dict: its "stored state", which a
    fresh actor at the same address loads in ``on_start``."""

    stored: dict[str, list[Any]] = {}
    made = 0

    def __init__(self, ctx: ActorContext) -> None:
        if ctx.key.startswith("refused"):
            raise LookupError(f"no such store {ctx.key!r}")
        super().__init__(ctx)
        Store.made += 1
        self.items: list[Any] = []

    async def on_start(self) -> None:
        self.items = list(Store.stored.get(self.ctx.address, []))

    async def receive(self, message: Any) -> Any:
        if message == "boom":
            raise RuntimeError("boom!")
        self.items.append(message)
        Store.stored[self.ctx.address] = list(self.items)
        return list(self.items)


@pytest.fixture(autouse=True)
def _empty_store() -> None:
    Store.stored.clear()


def runtime(**supervision: Any) -> Runtime:
    rt = Runtime()
    rt.register("memory", Store, supervision=SupervisionConfig(**supervision))
    rt.register("pool", Store)
    return rt


@pytest.mark.parametrize("address", list(BAD_ADDRESSES), ids=repr)
async def test_a_bad_address_is_refused_where_it_is_sent(address: Any) -> None:
    problem = BAD_ADDRESSES[address]
    async with runtime() as rt:
        sends = [
            lambda: rt.tell(address, "x"),
            lambda: rt.ask(address, "x"),
            lambda: rt.ref(address).tell("x"),
        ]
        for send in sends:
            with pytest.raises(InvalidAddressError, match="invalid actor address") as caught:
                await send()
            assert problem in str(caught.value)
            assert "'kind/key'" in str(caught.value)
        for sync_send in (lambda: rt.tell_nowait(address, "x"), lambda: rt.ref(address)):
            with pytest.raises(InvalidAddressError, match="invalid actor address"):
                sync_send()
        with pytest.raises(InvalidAddressError):
            rt.pipe(anyio.lowlevel.checkpoint, address)
        # Both an ActorError and, for code written against ref(), a ValueError.
        with pytest.raises(ValueError, match="invalid actor address"):
            rt.ref(address)
        # Nothing was made or counted, and the runtime serves on.
        stats = rt.stats()
        assert (stats.actors, stats.failures, stats.processed) == (0, 0, 0)
        assert await rt.ask("memory/alice", "after") == ["after"]


async def test_the_dispatcher_refuses_an_envelope_that_got_past_the_send_side_check() -> None:
    # What a transport does with an envelope read from elsewhere: hand it to the host.
    async with runtime() as rt:
        for address in ("memory/", "memory", "pool/", "ghost/a"):
            envelope = Envelope(recipient=address, body="x")
            with pytest.raises(ActorError) as caught:
                rt.deliver_nowait(envelope)
            with pytest.raises(ActorError):
                await rt.deliver(envelope)
            expected = ActorNotFoundError if address == "ghost/a" else InvalidAddressError
            assert isinstance(caught.value, expected)
        assert await rt.ask("memory/alice", "still here") == ["still here"]
        assert rt.stats().failures == 0


async def test_a_factory_that_refuses_an_address_fails_that_address_only() -> None:
    async with runtime(max_restarts=0) as rt:
        with pytest.raises(ActorNotFoundError, match="LookupError: no such store 'refused1'"):
            await rt.ask("memory/refused1", "x")
        with capture_logs() as logs:
            await rt.tell("memory/refused2", "x")
            await eventually(_async(lambda: rt.stats().rejected >= 2), "the tell is refused")
        assert any(e["event"] == "message_refused" and "refused2" in e["reason"] for e in logs)
        # Refusals count against no actor: even a budget of 0 restarts stops nothing.
        assert await rt.ask("memory/alice", "fine") == ["fine"]
        stats = rt.stats()
        assert (stats.failures, stats.restarts, stats.stopped) == (0, 0, 0)
        assert stats.rejected == 2


async def test_a_stopped_actor_refuses_during_its_back_off_then_comes_back_from_its_state() -> None:
    async with runtime(max_restarts=1, within_seconds=60, backoff_seconds=0.5) as rt:
        assert await rt.ask("memory/s", "kept") == ["kept"]
        for _ in range(2):  # one restart, then the second failure stops it
            with pytest.raises(HandlerError):
                await rt.ask("memory/s", "boom")
        assert rt.stop_reason("memory/s") is not None
        stats = rt.stats()
        assert (stats.stopped, stats.active) == (1, 0)  # deactivated: no actor object
        with pytest.raises(ActorStoppedError, match=r"no messages for .*s more") as caught:
            await rt.ask("memory/s", "refused")
        assert "more than 1 restarts" in str(caught.value)
        with pytest.raises(ActorStoppedError):
            rt.tell_nowait("memory/s", "refused too")
        made = Store.made

        async def back() -> bool:
            try:
                await rt.ask("memory/s", "back")
            except ActorStoppedError:
                return False
            return True

        await eventually(back, "the actor comes back after its back-off")
        # A fresh actor, loaded from what its predecessor stored; refused mail is not in it.
        assert Store.made == made + 1
        assert await rt.ask("memory/s", "again") == ["kept", "back", "again"]
        assert rt.stop_reason("memory/s") is None
        assert rt.stats().stopped == 0
        # With a fresh restart budget.
        with pytest.raises(HandlerError):
            await rt.ask("memory/s", "boom")
        assert await rt.ask("memory/s", "still") == ["kept", "back", "again", "still"]


async def test_the_mail_queued_for_an_actor_that_stops_is_refused_with_the_reason() -> None:
    async with runtime(strategy="stop", backoff_seconds=60) as rt:
        await rt.tell("memory/q", "boom")
        asks = []
        async with anyio.create_task_group() as tg:

            async def ask(i: int) -> None:
                try:
                    await rt.ask("memory/q", i)
                except ActorStoppedError as exc:
                    asks.append(exc)

            for i in range(3):
                tg.start_soon(ask, i)
        assert len(asks) == 3
        assert all("strategy 'stop'" in str(e) for e in asks)


def test_split_address_keeps_the_key_whole() -> None:
    assert split_address("memory/team/alice") == ("memory", "team/alice")
    assert split_address("pool/*") == ("pool", "*")


def _async(check: Any) -> Any:
    async def run() -> bool:
        return bool(check())

    return run
