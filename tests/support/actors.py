"""Small actors for the Redis tests, importable by worker subprocesses too.

Their message tags are namespaced (``ledger.Add``): tags share one registry with
the app's own commands, and two types with one tag cannot both be registered.

``Ledger`` is a durable actor: its append-only log holds every command id it
applied (so a test can check that each was applied exactly once), its snapshot
holds a running total.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, ClassVar

import anyio
import msgspec

from actormem.runtime import Actor, ActorContext, ActormemError, Runtime
from actormem.runtime.redis import register_error_types, register_message_types
from actormem.runtime.state import DurableChanges


class Add(msgspec.Struct, frozen=True, tag="ledger.Add"):
    """Add ``amount``; ``token`` is what the ledger records (unique per command).

    ``delay`` seconds of work make a backlog that a test can interrupt.
    """

    token: str
    amount: int = 1
    delay: float = 0.0


class LedgerState(msgspec.Struct, frozen=True):
    tokens: list[str]
    total: int
    activations: int


class GetState(msgspec.Struct, frozen=True, tag="ledger.GetState"):
    reply_type: ClassVar[Any] = LedgerState


class Boom(msgspec.Struct, frozen=True, tag="ledger.Boom"):
    """Makes the handler crash, after ``delay`` seconds of work."""

    delay: float = 0.0


class Reset(msgspec.Struct, frozen=True, tag="ledger.Reset"):
    """Clears the ledger (its log is replaced, not appended to)."""


class Erase(msgspec.Struct, frozen=True, tag="ledger.Erase"):
    """Erases the ledger: its stored log and snapshot are deleted, and the
    transport's copies of its commands so far removed."""


class Crash(msgspec.Struct, frozen=True, tag="ledger.Crash"):
    """Kills the worker process on the spot (a poison pill)."""


class Refuse(msgspec.Struct, frozen=True, tag="ledger.Refuse"):
    """Makes the handler raise an expected error."""


class Flaky(msgspec.Struct, frozen=True, tag="ledger.Flaky"):
    """Like ``Add``, but the handler fails the first time it sees ``token`` (in this
    process), after changing the ledger in memory: a transient fault mid-command."""

    token: str


class Relay(msgspec.Struct, frozen=True, tag="ledger.Relay"):
    """Tells ``Add(token)`` to ``to``, then fails the first time it sees ``token``."""

    token: str
    to: str


class Pass(msgspec.Struct, frozen=True, tag="ledger.Pass"):
    """Has a ledger record ``token`` and tell ``Add(token)`` to ``to``; with
    ``forward``, hand ``Add(token)`` on to ``to`` instead (recording nothing)."""

    token: str
    to: str
    forward: bool = False


register_message_types(Add, GetState, Boom, Crash, Refuse, Reset, Flaky, Relay, Erase, Pass)

_encoder = msgspec.msgpack.Encoder()
_int = msgspec.msgpack.Decoder(int)


class RefusedError(ActormemError):
    """The ledger refused the command."""


register_error_types(RefusedError)


class Ledger(Actor):
    """A durable ledger (see the module docstring)."""

    activations = 0
    #: Flaky tokens seen (each fails once).
    flaked: ClassVar[set[str]] = set()

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.tokens: list[str] = []
        self.total = 0
        self._new: list[bytes] = []
        self._dirty = False
        self._replace = False
        self._erase = False

    async def on_start(self) -> None:
        Ledger.activations += 1

    async def receive(self, message: Any) -> Any:
        match message:
            case Add(token=token, amount=amount, delay=delay):
                if delay:
                    await anyio.sleep(delay)
                self.tokens.append(token)
                self._new.append(token.encode())
                self.total += amount
                self._dirty = True
                return self.total
            case GetState():
                return LedgerState(list(self.tokens), self.total, Ledger.activations)
            case Boom(delay=delay):
                if delay:
                    await anyio.sleep(delay)
                raise RuntimeError("boom")
            case Flaky(token=token):
                self.tokens.append(token)
                self._new.append(token.encode())
                if token not in Ledger.flaked:
                    Ledger.flaked.add(token)
                    raise RuntimeError(f"flaky {token}")
                self.total += 1
                self._dirty = True
                return self.total
            case Reset():
                self.tokens, self.total = [], 0
                self._new, self._dirty, self._replace = [], True, True
                return 0
            case Erase():
                self.tokens, self.total, self._new = [], 0, []
                self._erase = True
                return 0
            case Crash():
                os._exit(3)
            case Refuse():
                raise RefusedError("refused on purpose")
            case Pass(token=token, to=to, forward=forward):
                if forward:
                    return self.ctx.forward(to, Add(token))
                self.tokens.append(token)
                self._new.append(token.encode())
                self._dirty = True
                await self.ctx.tell(to, Add(token))
                return None
        raise TypeError(f"unexpected {message!r}")

    def durable_changes(self) -> DurableChanges:
        appended, self._new = self._new, []
        if self._erase:
            self._erase = self._dirty = self._replace = False
            return DurableChanges(appended, b"", replace_log=True, erase=True)
        snapshot = _encoder.encode(self.total) if self._dirty else None
        replace, self._dirty, self._replace = self._replace, False, False
        return DurableChanges(appended, snapshot, replace)

    def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
        self.tokens = [entry.decode() for entry in log]
        self.total = _int.decode(snapshot) if snapshot is not None else 0


class Echo(Actor):
    """Replies with what it got; not durable."""

    async def receive(self, message: Any) -> Any:
        return message


class Relayer(Actor):
    """Passes tokens on to a ledger, failing once per token after sending; not durable."""

    seen: ClassVar[set[str]] = set()

    async def receive(self, message: Any) -> Any:
        match message:
            case Relay(token=token, to=to):
                await self.ctx.ref(to).tell(Add(token))
                if token not in Relayer.seen:
                    Relayer.seen.add(token)
                    raise RuntimeError(f"failed after relaying {token}")
                return None
        raise TypeError(f"unexpected {message!r}")


class SnapshotCorruptError(ActormemError):
    """A stored snapshot did not match its own checksum."""


class HeavyLedger(Ledger):
    """A ledger whose snapshot is large (``HEAVY_SNAPSHOT_BYTES``) and checksummed,
    so a worker killed while writing it has every chance to leave half of one.

    The snapshot is ``[total, checksum, padding]``; the padding changes with the
    total. Loading a snapshot whose checksum does not match raises.
    """

    size: ClassVar[int] = 1 << 20

    def durable_changes(self) -> DurableChanges:
        changes = super().durable_changes()
        if changes.snapshot is None:
            return changes
        seed = hashlib.blake2b(str(self.total).encode()).digest()
        padding = seed * (self.size // len(seed))
        checksum = hashlib.blake2b(padding, digest_size=16).digest()
        snapshot = _encoder.encode([self.total, checksum, padding])
        return DurableChanges(changes.log_appends, snapshot, changes.replace_log)

    def durable_restore(self, snapshot: bytes | None, log: list[bytes]) -> None:
        self.tokens = [entry.decode() for entry in log]
        self.total = 0
        if snapshot is not None:
            total, checksum, padding = msgspec.msgpack.decode(snapshot)
            if hashlib.blake2b(padding, digest_size=16).digest() != checksum:
                raise SnapshotCorruptError("the stored snapshot does not match its checksum")
            self.total = total


def register(rt: Runtime) -> None:
    """Register the test kinds (the worker subprocesses call this)."""
    rt.register("ledger", Ledger)
    rt.register("heavy", HeavyLedger)
    rt.register("echo", Echo)
    rt.register("relay", Relayer)


class Brittle(Ledger):
    """A durable actor that cannot say what changed (a bug in its protocol code)."""

    def durable_changes(self) -> DurableChanges:
        raise ValueError("cannot encode my state")


def register_named(rt: Runtime) -> None:
    """Register the ledger under the kind named by ``TEST_LEDGER_KIND``."""
    rt.register(os.environ["TEST_LEDGER_KIND"], Ledger)


def register_app_and_ledger(rt: Runtime) -> None:
    """Register the app's actors (its config from the worker's environment) and the
    ledger, whose ``Boom`` makes a handler crash."""
    from actormem.actors.app.wiring import worker_register

    worker_register(rt)
    rt.register("ledger", Ledger)
