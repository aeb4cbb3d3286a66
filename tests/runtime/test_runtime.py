"""The actor machinery: tell/ask, backpressure, supervision, shutdown."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
from structlog.testing import capture_logs

from actormem.runtime import (
    Actor,
    ActorContext,
    ActorNotFoundError,
    ActorStoppedError,
    AskTimeoutError,
    ConfigError,
    HandlerError,
    MailboxFullError,
    Runtime,
    RuntimeClosedError,
    RuntimeConfig,
    SupervisionConfig,
    TooManyAsksError,
)

pytestmark = pytest.mark.anyio


class Counter(Actor):
    """Counts messages; 'boom' crashes it, ('sleep', s) sleeps, ('bad',) is bad input."""

    instances = 0

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.seen: list[Any] = []
        Counter.instances += 1

    async def receive(self, message: Any) -> Any:
        if message == "boom":
            raise RuntimeError("boom!")
        if message == "bad":
            raise ConfigError("bad input")
        if isinstance(message, tuple) and message[0] == "sleep":
            await anyio.sleep(message[1])
        self.seen.append(message)
        return list(self.seen)


def runtime(**overrides: Any) -> Runtime:
    rt = Runtime(RuntimeConfig(**overrides))
    rt.register("counter", Counter)
    return rt


async def test_ask_returns_the_reply_and_messages_are_handled_in_order() -> None:
    async with runtime() as rt:
        ref = rt.ref("counter/a")
        for i in range(5):
            await ref.tell(i)
        assert await ref.ask("last") == [0, 1, 2, 3, 4, "last"]


async def test_each_address_is_its_own_actor() -> None:
    async with runtime() as rt:
        await rt.ref("counter/a").tell(1)
        assert await rt.ref("counter/b").ask(2) == [2]
        assert await rt.ref("counter/a").ask(3) == [1, 3]
        assert rt.stats().actors == 2


async def test_idle_actors_hold_no_task() -> None:
    async with runtime(dispatchers=2) as rt:
        for i in range(2000):
            await rt.ref(f"counter/{i}").tell(i)
        assert await rt.ref("counter/1999").ask("x") == [1999, "x"]
        # Only the dispatchers run, however many actors there are.
        tasks = [t for t in anyio.get_running_tasks() if "dispatch" in (t.name or "")]
        assert len(tasks) == 2
        assert rt.stats().active == 2000


class Waiter(Actor):
    """Waits on the shared event before it answers: a handler that suspends."""

    gate: anyio.Event
    #: Set when four handlers wait at once.
    four: anyio.Event
    waiting = 0

    async def receive(self, message: Any) -> Any:
        Waiter.waiting += 1
        if Waiter.waiting == 4:
            Waiter.four.set()
        await Waiter.gate.wait()
        return message


async def test_handlers_that_suspend_get_every_dispatcher() -> None:
    """Tells sent in one burst wake one dispatcher; each woken one that finds more
    cells ready wakes the next, so as many handlers wait at once as there are
    dispatchers."""
    Waiter.gate, Waiter.four, Waiter.waiting = anyio.Event(), anyio.Event(), 0
    async with Runtime(RuntimeConfig(dispatchers=4)) as rt:
        rt.register("waiter", Waiter)
        for i in range(6):
            rt.tell_nowait(f"waiter/{i}", i)
        with anyio.fail_after(5):
            await Waiter.four.wait()
        assert Waiter.waiting == 4
        Waiter.gate.set()
        assert await rt.ask("waiter/last", "end") == "end"
        assert Waiter.waiting == 7


async def test_ask_timeout_names_the_actor_and_message() -> None:
    async with runtime() as rt:
        with pytest.raises(AskTimeoutError, match=r"counter/slow.*tuple.*0\.05s"):
            await rt.ref("counter/slow").ask(("sleep", 1.0), timeout=0.05)


async def test_an_ask_whose_asker_gave_up_is_not_handled() -> None:
    """Past capacity, an ask that timed out while queued is dropped unhandled; the
    mail behind it is handled as usual."""
    async with runtime() as rt:
        ref = rt.ref("counter/a")
        await ref.tell(("sleep", 0.2))  # occupies the actor
        await anyio.sleep(0.01)
        with pytest.raises(AskTimeoutError):
            await ref.ask("late", timeout=0.05)
        await ref.tell("after")
        assert await ref.ask("end") == [("sleep", 0.2), "after", "end"]
        assert rt.stats().expired == 1


async def test_expired_asks_are_handled_when_shedding_is_off() -> None:
    async with runtime(shed_expired_asks=False) as rt:
        ref = rt.ref("counter/a")
        await ref.tell(("sleep", 0.2))
        await anyio.sleep(0.01)
        with pytest.raises(AskTimeoutError):
            await ref.ask("late", timeout=0.05)
        assert await ref.ask("end") == [("sleep", 0.2), "late", "end"]
        assert rt.stats().expired == 0


async def test_asks_past_max_pending_asks_fail_at_once_unsent() -> None:
    async with runtime(max_pending_asks=2) as rt:
        ref = rt.ref("counter/a")
        await ref.tell(("sleep", 0.2))  # occupies the actor: asks queue
        await anyio.sleep(0.01)
        results: list[Any] = []
        async with anyio.create_task_group() as tg:

            async def ask(i: int) -> None:
                results.append(await ref.ask(i))

            tg.start_soon(ask, 1)
            tg.start_soon(ask, 2)
            await anyio.sleep(0.01)
            with pytest.raises(TooManyAsksError, match=r"counter/a.*int not sent.*2 asks"):
                await ref.ask(3)
        assert sorted(r[-1] for r in results) == [1, 2]
        assert 3 not in await ref.ask("end")  # never delivered


async def test_tell_nowait_on_full_mailbox_raises_and_drops_nothing() -> None:
    async with runtime(mailbox_size=3) as rt:
        ref = rt.ref("counter/a")
        await ref.tell(("sleep", 0.1))  # occupies the actor
        await anyio.sleep(0.01)
        for i in range(3):
            ref.tell_nowait(i)
        with pytest.raises(MailboxFullError, match="counter/a: mailbox full"):
            ref.tell_nowait(99)
        assert await ref.ask("end") == [("sleep", 0.1), 0, 1, 2, "end"]


async def test_tell_waits_while_the_mailbox_is_full() -> None:
    async with runtime(mailbox_size=2) as rt:
        ref = rt.ref("counter/a")
        await ref.tell(("sleep", 0.05))
        await anyio.sleep(0.01)
        done: list[int] = []

        async def producer() -> None:
            for i in range(6):
                await ref.tell(i)
                done.append(i)

        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            await anyio.sleep(0.02)
            # The sender is blocked by backpressure, not dropping messages.
            assert len(done) < 6
        assert await ref.ask("end") == [("sleep", 0.05), 0, 1, 2, 3, 4, 5, "end"]
        assert rt.stats().max_mailbox_depth == 0


async def test_a_producer_whose_tells_never_wait_yields_every_throughput_tells() -> None:
    # Mailboxes with room: no tell waits, yet the actors run while the producer goes on.
    async with runtime(throughput=4) as rt:
        handled_after: list[int] = []
        for i in range(12):
            await rt.tell(f"counter/{i}", i)
            handled_after.append(rt.processed)
        assert handled_after[:3] == [0, 0, 0]  # no turn given up before the 4th tell
        assert handled_after[3] > 0
        assert handled_after[-1] > handled_after[3]


async def test_unknown_kind_and_bad_address_are_clear_errors() -> None:
    async with runtime() as rt:
        with pytest.raises(ActorNotFoundError, match="no actor kind 'nope'"):
            await rt.ref("nope/a").tell(1)
        with pytest.raises(ValueError, match="kind/key"):
            rt.ref("no-slash")


async def test_expected_errors_answer_the_asker_without_a_restart() -> None:
    async with runtime() as rt:
        ref = rt.ref("counter/a")
        await ref.tell(1)
        with pytest.raises(ConfigError, match="bad input"):
            await ref.ask("bad")
        assert await ref.ask(2) == [1, 2]
        stats = rt.stats()
        assert (stats.rejected, stats.failures, stats.restarts) == (1, 0, 0)


async def test_resume_keeps_state_after_a_crash() -> None:
    async with runtime() as rt:
        ref = rt.ref("counter/a")
        await ref.tell(1)
        with (
            capture_logs() as logs,
            pytest.raises(HandlerError, match="RuntimeError: boom!") as info,
        ):
            await ref.ask("boom")
        assert isinstance(info.value.__cause__, RuntimeError)
        assert await ref.ask(2) == [1, 2]
        events = [e["event"] for e in logs]
        assert "actor_handler_failed" in events and "actor_restarted" in events


async def test_reset_strategy_starts_from_fresh_state() -> None:
    rt = Runtime()
    rt.register("counter", Counter, supervision=SupervisionConfig(strategy="reset"))
    async with rt:
        ref = rt.ref("counter/a")
        await ref.tell(1)
        await ref.tell("boom")
        assert await ref.ask(2) == [2]


async def test_restart_intensity_stops_the_actor_and_fails_pending_asks() -> None:
    rt = Runtime()
    policy = SupervisionConfig(max_restarts=2, within_seconds=60)
    rt.register("counter", Counter, supervision=policy)
    async with rt, anyio.create_task_group() as tg:
        ref = rt.ref("counter/a")
        for _ in range(2):
            with pytest.raises(HandlerError):
                await ref.ask("boom")
        errors: list[BaseException] = []

        async def late_ask() -> None:
            try:
                await ref.ask("after")
            except ActorStoppedError as exc:
                errors.append(exc)

        await ref.tell(("sleep", 0.05))
        await ref.tell("boom")  # third failure within the period: stop
        tg.start_soon(late_ask)
        await anyio.sleep(0.2)
        assert len(errors) == 1
        assert "more than 2 restarts" in str(errors[0])
        assert rt.stop_reason("counter/a") is not None
        with pytest.raises(ActorStoppedError):
            await ref.tell(1)
        # Other actors of the kind are unaffected.
        assert await rt.ref("counter/b").ask(1) == [1]


async def test_a_failing_start_counts_as_a_crash() -> None:
    class Broken(Actor):
        async def on_start(self) -> None:
            raise RuntimeError("cannot start")

        async def receive(self, message: Any) -> Any:
            return message

    rt = Runtime()
    rt.register("broken", Broken, supervision=SupervisionConfig(max_restarts=1))
    async with rt:
        for _ in range(2):  # a restart, then the second failure stops it
            with pytest.raises(HandlerError, match="cannot start"):
                await rt.ref("broken/a").ask(1)
        with pytest.raises(ActorStoppedError, match="more than 1 restarts"):
            await rt.ref("broken/a").ask(1)


@pytest.mark.parametrize("starts", [True, False], ids=["start-returns", "start-fails"])
async def test_an_actor_discarded_while_it_starts_leaves_the_runtime_serving(starts: bool) -> None:
    # A transport discards an actor (its shard's lease went) while the actor loads
    # its state: the dispatcher finds the mail it was starting for gone, and goes on.
    begun, release = anyio.Event(), anyio.Event()

    class Slow(Actor):
        async def on_start(self) -> None:
            begun.set()
            await release.wait()
            if not starts:
                raise RuntimeError("cannot start")

        async def receive(self, message: Any) -> Any:
            return message

    rt = Runtime()
    rt.register("slow", Slow)
    async with rt:
        for i in range(3):
            await rt.ref("slow/a").tell(i)
        await begun.wait()
        assert rt.discard("slow/a") == 3
        release.set()
        begun, release = anyio.Event(), anyio.Event()
        release.set()
        starts = True
        assert await rt.ref("slow/a").ask("again") == "again"  # a new actor serves it


async def test_shutdown_drains_mailboxes() -> None:
    rt = runtime()
    async with rt:
        ref = rt.ref("counter/a")
        for i in range(100):
            await ref.tell(i)
    assert rt.stats().processed == rt.processed == 100


async def test_shutdown_waits_for_a_handler_suspended_with_nothing_else_ready() -> None:
    rt = runtime()
    async with rt:
        await rt.ref("counter/a").tell(("sleep", 0.05))
        await rt.ref("counter/b").tell(1)
        await anyio.sleep(0.01)  # counter/a's handler is suspended; the ready queue is empty
        assert rt.processed == 1
    assert rt.processed == 2


async def test_shutdown_fails_pending_asks_and_nothing_hangs() -> None:
    rt = runtime(drain_timeout=0.1)
    results: list[BaseException] = []

    async def asker(ref: Any) -> None:
        try:
            await ref.ask(("sleep", 30), timeout=60)
        except RuntimeClosedError as exc:
            results.append(exc)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg, rt:
            for i in range(3):
                tg.start_soon(asker, rt.ref(f"counter/{i}"))
            tg.start_soon(asker, rt.ref("counter/0"))  # queued behind the first
            await anyio.sleep(0.05)
    assert len(results) == 4
    with pytest.raises(RuntimeClosedError):
        await rt.ref("counter/0").tell(1)


async def test_stop_hooks_run_at_shutdown() -> None:
    stopped: list[str] = []

    class Hooked(Actor):
        async def receive(self, message: Any) -> Any:
            return message

        async def on_stop(self) -> None:
            stopped.append(self.ctx.key)

    rt = Runtime()
    rt.register("hooked", Hooked)
    async with rt:
        await rt.ref("hooked/a").ask(1)
        await rt.ref("hooked/b").ask(1)
    assert sorted(stopped) == ["a", "b"]


async def test_a_runtime_opens_once_and_must_be_open() -> None:
    rt = runtime()
    with pytest.raises(RuntimeClosedError, match="not open"):
        await rt.ref("counter/a").tell(1)
    async with rt:
        pass
    with pytest.raises(RuntimeError, match="only once"):
        await rt.__aenter__()


async def test_pipe_runs_work_in_the_background_and_tells_the_result() -> None:
    class Piper(Actor):
        def __init__(self, ctx: ActorContext) -> None:
            super().__init__(ctx)
            self.results: list[Any] = []

        async def receive(self, message: Any) -> Any:
            if message == "start":

                async def work() -> str:
                    await anyio.sleep(0.05)
                    return "piped"

                self.ctx.pipe(work, wrap=lambda result, error: ("result", result, error))
                return "started"
            if isinstance(message, tuple):
                self.results.append(message)
                return None
            return list(self.results)

    rt = Runtime()
    rt.register("piper", Piper)
    async with rt:
        ref = rt.ref("piper/a")
        assert await ref.ask("start") == "started"
        # The actor keeps serving while the work runs.
        assert await ref.ask("results") == []
        await anyio.sleep(0.1)
        assert await ref.ask("results") == [("result", "piped", None)]


def test_registering_a_kind_checks_its_name() -> None:
    rt = Runtime()
    rt.register("a", Counter)
    with pytest.raises(ValueError, match="already registered"):
        rt.register("a", Counter)
    with pytest.raises(ValueError, match="without '/'"):
        rt.register("a/b", Counter)


class Inline(Actor):
    """Never suspends in receive, so asks to it may run inline."""

    inline_asks = True

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.seen: list[Any] = []

    async def receive(self, message: Any) -> Any:
        if message == "boom":
            raise RuntimeError("boom!")
        self.seen.append((message, anyio.get_current_task().id))
        return [m for m, _ in self.seen]


async def test_inline_asks_keep_mailbox_order_and_supervision() -> None:
    rt = Runtime(RuntimeConfig(supervision=SupervisionConfig(max_restarts=1)))
    rt.register("inline", Inline)
    async with rt:
        ref = rt.ref("inline/a")
        assert await ref.ask("first") == ["first"]  # activation goes through the mailbox
        me = anyio.get_current_task().id
        assert await ref.ask("second") == ["first", "second"]
        actor = rt._cells["inline/a"].actor
        assert actor is not None and actor.seen[-1][1] == me  # ran in the asker's task
        for i in range(3):
            await ref.tell(i)
        # Queued mail is handled before the ask's message, never overtaken.
        assert await ref.ask("after") == ["first", "second", 0, 1, 2, "after"]
        with pytest.raises(HandlerError, match="boom!"):
            await ref.ask("boom")
        assert rt.stats().restarts == 1
        with pytest.raises(HandlerError):
            await ref.ask("boom")
        with pytest.raises(ActorStoppedError):
            await ref.ask("x")


async def test_a_tight_loop_of_inline_asks_lets_other_tasks_run() -> None:
    rt = Runtime()
    rt.register("inline", Inline)
    ticks = 0
    async with rt:
        ref = rt.ref("inline/a")
        await ref.ask(0)

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            for i in range(5000):
                await ref.ask(i)
            assert ticks > 0
            tg.cancel_scope.cancel()


async def test_piped_work_sends_with_ids_of_its_own() -> None:
    # A handler's own tells carry ids derived from its command's (so a redelivered
    # command repeats them); what it pipes finishes at any later time, so its tell
    # must not take one of those ids.
    from actormem.runtime._envelope import Envelope
    from actormem.runtime._handling import derived_id

    seen: list[str] = []
    piped = anyio.Event()

    class Piper(Actor):
        async def receive(self, message: Any) -> Any:
            async def work() -> None:
                seen.append(derived_id())
                piped.set()

            seen.append(derived_id())
            self.ctx.pipe(work)
            return None

    async with Runtime(RuntimeConfig()) as rt:
        rt.register("piper", Piper)
        await rt.deliver(Envelope(recipient="piper/a", body="go", id="cmd1"))
        with anyio.fail_after(5):
            await piped.wait()
    assert seen == ["cmd1.1", ""]


async def test_a_service_asked_for_before_open_runs_once_the_runtime_is_open() -> None:
    started: list[str] = []

    async def service(name: str) -> None:
        started.append(name)
        await anyio.sleep_forever()

    rt = Runtime()
    rt.on_open(service, "early")
    assert started == []
    async with rt:
        rt.on_open(service, "late")
        with anyio.fail_after(5):
            while len(started) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert sorted(started) == ["early", "late"]
        assert await rt.take_due("counter", 1.0) == []  # in process nothing is stored
    with pytest.raises(RuntimeClosedError):
        rt.on_open(service, "after")


@pytest.mark.parametrize("inline", [False, True])
async def test_a_handler_knows_whether_its_message_is_an_ask(inline: bool) -> None:
    seen: list[tuple[Any, bool]] = []

    class Recorder(Actor):
        inline_asks = inline

        async def receive(self, message: Any) -> Any:
            seen.append((message, self.ctx.asked))
            return message

    async with Runtime() as rt:
        rt.register("rec", Recorder)
        ref = rt.ref("rec/a")
        await ref.tell("told")
        assert await ref.ask("asked") == "asked"
        await ref.tell("told again")
        assert await ref.ask("asked again") == "asked again"
    assert seen == [("told", False), ("asked", True), ("told again", False), ("asked again", True)]
