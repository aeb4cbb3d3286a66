"""Types declared to cross processes reach the Redis codec, whichever loads first."""

from __future__ import annotations

import pytest

from tests.support.processes import printed


@pytest.mark.parametrize(
    "first", ["actormem", "actormem.runtime.redis"], ids=["domain-first", "redis-first"]
)
def test_the_default_codec_knows_the_domains_types_in_either_import_order(first: str) -> None:
    second = "actormem.runtime.redis" if first == "actormem" else "actormem"
    code = (
        f"import {first}\n"
        f"import {second}\n"
        "from actormem.actors.memory.commands import Add\n"
        "from actormem import MemoryInputError, Reply\n"
        "from actormem.runtime.redis import default_codec\n"
        "print(Add in default_codec.message_types())\n"
        "data = default_codec.encode_reply(Reply(7, error=MemoryInputError('bad')))\n"
        "print(type(default_codec.decode_reply(data).error) is MemoryInputError)\n"
    )
    out = printed(code)
    assert out.split() == ["True", "True"]
