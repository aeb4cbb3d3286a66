"""Some traffic for a running deployment, as a client: the run of docs/operations.md.

    python docs/examples/traffic.py deploy.toml

alice chats, records a memory, opens an episode and shares two insights; bob
subscribes to every topic and carol to ``market``; twenty villagers say one line
each; one command goes to ``ghost/x``, a kind no worker registers (a dead letter).
"""

from __future__ import annotations

import sys

import anyio

from actormem import MemoryRuntime, Message, load_app_config
from actormem.actors.memory.commands import Add
from actormem.runtime.redis import RedisTransport


async def main(path: str) -> None:
    config = load_app_config(path)
    client = RedisTransport(config.redis.url, config.redis, worker=False)
    async with MemoryRuntime(config, transport=client) as rt:
        bob, carol = rt.memory("bob"), rt.memory("carol")
        await bob.subscribe("market", "weather")
        await carol.subscribe("market")
        alice = rt.memory("alice")
        await alice.add(
            [
                {"role": "system", "content": "You are Alice, the town's baker."},
                {"role": "user", "name": "bob", "content": "Is the market open on Sunday?"},
                {"role": "assistant", "content": "Yes, from eight until noon."},
            ]
        )
        await alice.record({"role": "user", "content": "The market opens at eight on Sundays."})
        await alice.start_episode(topic="market day")
        await alice.share("The market opens at eight on Sundays.", "market")
        await alice.share("Rain is due on Sunday afternoon.", "weather")
        for n in range(20):
            villager = rt.memory(f"villager-{n:02d}")
            await villager.add({"role": "user", "content": f"Villager {n} says good morning."})
        await rt.tell("ghost/x", Add(messages=[Message(role="user", content="boo")]))
    print("traffic sent")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "deploy.toml")
