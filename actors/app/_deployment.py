"""What the operator's commands share: the arguments naming a deployment (its config
file or ``--redis-url``), a checked client of its Redis, and how results are printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec

from actormem.actors.config import AppConfig, load_app_config
from actormem.runtime.config import redact_url
from actormem.runtime.errors import ConfigError
from actormem.runtime.redis import connect, is_letter_id, open_client
from actormem.runtime.redis.config import RedisConfig

__all__ = (
    "READ_ONLY",
    "deployment_arguments",
    "deployment_config",
    "print_json",
    "run_on",
    "say",
)

#: What the help of every read-only command says.
READ_ONLY: Final = "Read-only: it changes nothing stored."


def deployment_arguments(
    parser: argparse.ArgumentParser, *, ids: str = "", json: bool = True
) -> None:
    """The arguments naming the deployment (and the dead letters, ``ids``)."""
    parser.add_argument(
        "config", nargs="?", default=None, help="the deployment's TOML config ([redis] url)"
    )
    parser.add_argument("--config", dest="config_opt", default=None, help=argparse.SUPPRESS)
    if ids:
        parser.add_argument("ids", nargs=1 if ids == "ID" else "+", metavar="ID")
    parser.add_argument(
        "--redis-url",
        metavar="URL",
        help="the deployment's Redis (default: the config's [redis] url); a password "
        "comes from the config's password_env variable (ACTORMEM_REDIS_PASSWORD by default)",
    )
    if json:
        parser.add_argument("--json", action="store_true", help="print JSON, for scripts")


def deployment_config(args: argparse.Namespace) -> AppConfig:
    """The deployment's config, its ``[redis]`` url from ``--redis-url`` if given.

    Raises:
        ConfigError: the file cannot be read, the url is not one, or none is named.
    """
    path = args.config_opt or args.config
    ids = getattr(args, "ids", None)
    # ``requeue ID ID`` with --redis-url: the first id is no config file.
    if path and ids is not None and not args.config_opt and _not_a_file(path):
        args.ids = [path, *ids]
        path = None
    app = load_app_config(path)
    config = app.redis
    if args.redis_url:
        try:
            config = config.replace(url=args.redis_url)
        except ValueError as exc:
            raise ConfigError(f"--redis-url {redact_url(args.redis_url)}: {exc}") from None
    if not config.url:
        raise ConfigError(
            f"{path or 'no config given'}: name the deployment's Redis with [redis] url "
            "or --redis-url"
        )
    return msgspec.structs.replace(app, redis=config)


def _not_a_file(path: str) -> bool:
    return is_letter_id(path) and not Path(path).exists()


def run_on(args: argparse.Namespace, work: Any) -> Any:
    """Return ``await work(client, config)`` with a checked client of the deployment
    (``config``: its ``[redis]`` section)."""
    config = deployment_config(args).redis

    async def main() -> Any:
        await check_url(config)
        async with open_client(config) as client:
            return await work(client, config)

    return anyio.run(main)


async def check_url(config: RedisConfig) -> None:
    """Refuse, as a config error, a url redis-py cannot use (nothing is sent)."""
    try:
        client = connect(config)
    except ValueError as exc:
        raise ConfigError(f"the Redis url {redact_url(config.url or '')}: {exc}") from None
    await client.aclose()


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(data)).decode() + "\n")


def say(line: str) -> None:
    """Print one line on stderr."""
    print(line, file=sys.stderr)
