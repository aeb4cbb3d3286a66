"""The operator's commands against a running deployment: ``dead-letters``, ``health``
and ``inspect`` (the last from :mod:`.inspection`).

Each takes the deployment's config file the way ``actormem worker`` does (its
``[redis]`` section: url, prefix, shards, lease time), or ``--redis-url`` (with the
defaults for the rest, or the config's). ``dead-letters list`` and ``show``,
``health`` and ``inspect`` are read-only: they change nothing stored.

Exit codes: 0 done (healthy); 1 some of the ids given are no dead letter, or
could not be requeued (the rest were handled), or the deployment is unhealthy, or
(``inspect --agent``) no such agent; 2 a usage or config error, or
(``dead-letters``) Redis unreachable or refusing.
"""

from __future__ import annotations

import argparse
import contextlib
from datetime import UTC, datetime
from typing import Any, Final

import anyio
import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from actormem.actors.app import wiring  # noqa: F401  (declares the app's message types)
from actormem.actors.app._deployment import (
    READ_ONLY,
    check_url,
    deployment_arguments,
    deployment_config,
    print_json,
    run_on,
    say,
)
from actormem.actors.app.inspection import add_inspect
from actormem.runtime.cli import OneLineParser, positive_int
from actormem.runtime.errors import MessageDecodeError
from actormem.runtime.redis import (
    DeadLetter,
    count_dead_letters,
    default_codec,
    drop_dead_letters,
    is_letter_id,
    read_dead_letters,
    requeue_dead_letters,
)
from actormem.runtime.redis.config import RedisConfig
from actormem.runtime.redis.health import DEFAULT_HEALTH_TIMEOUT, Health, check_health

__all__ = ("add_commands", "describe")

#: Dead letters ``list`` shows unless told otherwise.
DEFAULT_LIST_LIMIT: Final = 50
EXIT_SOME_FAILED: Final = 1


def add_commands(subs: Any) -> None:
    """Add ``dead-letters``, ``health`` and ``inspect`` to the CLI's subparsers."""
    dead = subs.add_parser(
        "dead-letters",
        help="list, show, requeue or drop the commands the workers gave up on",
        description="The dead letters of a deployment: commands a worker could not "
        "decode or handle, with the reason. Exit codes: 0 done; 1 an id given is no "
        "dead letter or could not be requeued (the others were handled); 2 a usage "
        "or config error, or Redis unreachable.",
    )
    actions = dead.add_subparsers(dest="action", metavar="ACTION", parser_class=OneLineParser)
    actions.required = True
    listing = actions.add_parser(
        "list",
        help="list the dead letters, oldest first (read-only)",
        description=f"List the dead letters, oldest first: id, time, recipient, command "
        f"and reason. {READ_ONLY}",
    )
    deployment_arguments(listing)
    listing.add_argument(
        "--limit",
        type=positive_int,
        default=DEFAULT_LIST_LIMIT,
        metavar="N",
        help="show at most N (default: %(default)s)",
    )
    listing.set_defaults(func=_list)
    show = actions.add_parser(
        "show",
        help="show one dead letter with its envelope decoded (read-only)",
        description=f"Show one dead letter: why, where from, and the original command "
        f"decoded where possible. {READ_ONLY}",
    )
    deployment_arguments(show, ids="ID")
    show.set_defaults(func=_show)
    requeue = actions.add_parser(
        "requeue",
        help="put dead letters back on their shards, to be handled once",
        description="Put these dead letters back on their shard streams as commands "
        "with their original command ids: one that was applied after all is not "
        "applied again. A requeued letter leaves the dead letters.",
    )
    deployment_arguments(requeue, ids="ID...")
    requeue.set_defaults(func=_requeue)
    drop = actions.add_parser(
        "drop", help="delete dead letters", description="Delete these dead letters."
    )
    deployment_arguments(drop, ids="ID...")
    drop.set_defaults(func=_drop)

    health = subs.add_parser(
        "health",
        help="exit 0 if every shard has a live owner and Redis answers (read-only)",
        description="Check a running deployment, for container probes: exit 0 when Redis "
        "answers within the timeout and every shard has an owner whose lease is fresh "
        "(renewed within two heartbeats); else exit 1 with one line per problem (2: a "
        f"usage or config error). {READ_ONLY}",
    )
    deployment_arguments(health, json=False)
    health.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_HEALTH_TIMEOUT,
        metavar="SECONDS",
        help="how long Redis has to answer (default: %(default)s)",
    )
    health.set_defaults(func=_health)
    add_inspect(subs)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text}")
    return value


# -- describing a dead letter --------------------------------------------------------------


def describe(letter: DeadLetter) -> dict[str, Any]:
    """A dead letter as JSON-able data, its envelope decoded where possible.

    Keys: ``id``, ``time`` (ISO 8601, UTC), ``reason``, ``stream``, ``entry``,
    ``worker``, ``recipient``, ``command`` (the body's type), ``command_id``,
    ``sender``, ``asked`` (an ask, whose asker was answered with the error),
    ``body`` (the command's fields) and ``undecodable`` (why the envelope, or its
    body, could not be decoded; absent when it could).
    """
    out: dict[str, Any] = {
        "id": letter.id,
        "time": datetime.fromtimestamp(letter.time, UTC).isoformat(timespec="milliseconds"),
        "reason": letter.reason,
        "stream": letter.stream,
        "entry": letter.entry,
        "worker": letter.worker,
        "recipient": None,
        "command": None,
        "command_id": None,
        "sender": None,
        "asked": False,
        "body": None,
    }
    if letter.data is None:
        out["undecodable"] = "the dead letter holds no envelope"
        return out
    try:
        env = default_codec.decode_envelope(letter.data)
    except MessageDecodeError as exc:
        out["undecodable"] = str(exc)
        out.update(_partial(letter.data))
        return out
    out.update(
        recipient=env.recipient,
        command=type(env.body).__name__,
        command_id=env.id or None,
        sender=env.sender,
        asked=env.reply_to is not None,
        body=msgspec.to_builtins(env.body),
    )
    return out


def _partial(data: bytes) -> dict[str, Any]:
    """What an envelope that fails to decode still shows, read as plain msgpack."""
    try:
        head = msgspec.msgpack.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return {}
    if not isinstance(head, dict):
        return {}
    body = head.get("body")
    found: dict[str, Any] = {
        "recipient": _text(head.get("recipient")),
        "command_id": _text(head.get("id")),
        "sender": _text(head.get("sender")),
        "asked": head.get("reply_to") is not None,
    }
    if isinstance(body, dict):
        found["command"] = _text(body.get("type"))
    with contextlib.suppress(TypeError, msgspec.EncodeError):
        found["body"] = msgspec.to_builtins(body)
    return found


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# -- the commands ------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    async def work(client: Any, config: RedisConfig) -> tuple[list[DeadLetter], int]:
        letters = await read_dead_letters(client, config, limit=args.limit)
        return letters, await count_dead_letters(client, config)

    letters, total = run_on(args, work)
    rows = [describe(letter) for letter in letters]
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no dead letters")
        return 0
    table = Table(title=f"dead letters ({len(rows)} of {total})", title_justify="left")
    for column in ("id", "time (UTC)", "recipient", "command", "reason"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            Text(row["id"]),
            Text(row["time"].replace("T", " ").removesuffix("+00:00")),
            Text(row["recipient"] or "?"),
            Text(row["command"] or "?"),
            Text(row["reason"]),
        )
    Console(soft_wrap=False).print(table)
    if total > len(rows):
        say(f"actormem: {total - len(rows)} more not shown (--limit)")
    return 0


def _show(args: argparse.Namespace) -> int:
    async def work(client: Any, config: RedisConfig) -> list[DeadLetter]:
        return await read_dead_letters(client, config, ids=args.ids)

    letters = run_on(args, work)
    if not letters:
        say(_unknown(args.ids[0]))
        return EXIT_SOME_FAILED
    row = describe(letters[0])
    if args.json:
        print_json(row)
        return 0
    table = Table(title=f"dead letter {row['id']}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    for key in ("time", "reason", "stream", "entry", "worker", "recipient", "command"):
        table.add_row(key, Text(str(row[key] if row[key] is not None else "?")))
    table.add_row("command id", Text(row["command_id"] or "?"))
    table.add_row("sender", Text(row["sender"] or "-"))
    table.add_row("asked", "yes (the asker got the error)" if row["asked"] else "no (a tell)")
    if "undecodable" in row:
        table.add_row("envelope", Text(f"cannot be decoded: {row['undecodable']}"))
    if row["body"] is not None:
        body = msgspec.json.format(msgspec.json.encode(row["body"])).decode()
        table.add_row("body", Text(body))
    Console(soft_wrap=False).print(table)
    return 0


def _requeue(args: argparse.Namespace) -> int:
    async def work(client: Any, config: RedisConfig) -> tuple[list[DeadLetter], list[str]]:
        found = await read_dead_letters(client, config, ids=args.ids)
        if not found:
            return found, []
        entries = [letter.id for letter in found]
        return found, await requeue_dead_letters(client, config, entries=entries)

    found, requeued = run_on(args, work)
    done = set(requeued)
    known = {letter.id: letter for letter in found}
    for letter in requeued:
        print(f"requeued {letter}")
    failed = 0
    for letter in dict.fromkeys(args.ids):
        if letter not in known:
            say(_unknown(letter))
            failed += 1
        elif letter not in done:
            say(
                f"actormem: dead letter {letter}: holds no command that can be requeued "
                f"(left in place; reason: {known[letter].reason})"
            )
            failed += 1
    return EXIT_SOME_FAILED if failed else 0


def _drop(args: argparse.Namespace) -> int:
    async def work(client: Any, config: RedisConfig) -> list[str]:
        return await drop_dead_letters(client, config, args.ids)

    dropped = set(run_on(args, work))
    failed = 0
    for letter in dict.fromkeys(args.ids):
        if letter in dropped:
            print(f"dropped {letter}")
        else:
            say(_unknown(letter))
            failed += 1
    return EXIT_SOME_FAILED if failed else 0


def _unknown(letter: str) -> str:
    if not is_letter_id(letter):
        return (
            f"actormem: {letter!r} is not a dead-letter id (they look like 1732560000000-0; "
            "see 'actormem dead-letters list')"
        )
    return f"actormem: dead letter {letter}: no such dead letter"


def _health(args: argparse.Namespace) -> int:
    config = deployment_config(args).redis

    async def main() -> Health:
        await check_url(config)
        return await check_health(config, timeout=args.timeout)

    health = anyio.run(main)
    for line in health.problems:
        print(line)
    if not health.healthy:
        return EXIT_SOME_FAILED
    workers = len(health.workers)
    print(
        f"ok: {health.shards} shards owned, {workers} worker{'s' if workers != 1 else ''} "
        f"live, Redis answered in {1000 * (health.seconds or 0):.0f} ms"
    )
    return 0
