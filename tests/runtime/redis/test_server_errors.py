"""A redis-server that cannot start says why in one line, without its log's prefix."""

from __future__ import annotations

import socket

import pytest

from actormem.runtime.errors import TransportUnavailableError
from actormem.runtime.redis import EmbeddedRedis

pytestmark = pytest.mark.anyio


async def test_a_setting_the_server_refuses_is_named() -> None:
    with pytest.raises(TransportUnavailableError) as caught:
        await EmbeddedRedis(port=99_999).start()
    message = str(caught.value)
    assert message.startswith("redis-server exited at start (code 1): 'port \"99999\"': ")
    assert "\n" not in message


async def test_a_port_in_use_is_one_line_from_the_log() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TransportUnavailableError) as caught:
            await EmbeddedRedis(port=port).start()
    message = str(caught.value)
    assert message.startswith(
        f"redis-server exited at start (code 1): Failed listening on port {port}"
    )
    assert "\n" not in message
