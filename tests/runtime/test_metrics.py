"""The Prometheus endpoint of an in-process runtime: what it counts, scraped over
HTTP as Prometheus scrapes it; two runtimes in one process; a port in use."""

from __future__ import annotations

from typing import Any

import pytest

from actormem.runtime import Actor, ConfigError, HandlerError, Runtime
from actormem.runtime.config import MetricsConfig
from actormem.runtime.metrics import MAX_COMMAND_LABELS, Distribution
from actormem.runtime.redis import free_port
from tests.support.processes import printed
from tests.support.scrape import parse, scrape, taken_port, value

pytestmark = pytest.mark.anyio


class Picky(Actor):
    """Echoes text, refuses numbers (bad input), crashes on ``"boom"``."""

    expected_errors = (ValueError,)

    async def receive(self, message: Any) -> Any:
        if isinstance(message, int):
            raise ValueError("no numbers")
        if message == "boom":
            raise RuntimeError("boom")
        return message


class Echo(Actor):
    async def receive(self, message: Any) -> Any:
        return message


async def test_the_endpoint_counts_commands_by_type_and_outcome() -> None:
    port = free_port()
    async with Runtime(metrics=MetricsConfig(port=port)) as rt:
        rt.register("picky", Picky)
        for i in range(5):
            assert await rt.ask(f"picky/{i % 2}", "hi") == "hi"
        with pytest.raises(ValueError):
            await rt.ask("picky/0", 7)
        with pytest.raises(HandlerError):
            await rt.ask("picky/1", "boom")
        assert await rt.passivate("picky/0")
        status, content_type, text = await scrape(port)
        missing, _, _ = await scrape(port, "/other")
        _, open_metrics, body = await scrape(port, accept="application/openmetrics-text")
    assert status == 200 and content_type.startswith("text/plain")
    samples = parse(text)
    assert value(samples, "actormem_commands_handled_total", command="str") == 6
    assert value(samples, "actormem_commands_handled_total", command="int") == 1
    assert value(samples, "actormem_commands_rejected_total", command="int") == 1
    assert value(samples, "actormem_commands_failed_total", command="str") == 1
    assert value(samples, "actormem_handling_seconds_count", kind="picky") == 7
    assert value(samples, "actormem_actors_active", kind="picky") == 1
    assert value(samples, "actormem_actors_passivated_total", kind="picky") == 1
    assert value(samples, "actormem_handler_failures_total") == 1
    assert value(samples, "actormem_asks_in_flight") == 0
    assert missing == 404
    assert open_metrics.startswith("application/openmetrics-text") and body.endswith("# EOF\n")


async def test_two_runtimes_in_one_process_keep_their_own_counts() -> None:
    ports = free_port(), free_port()
    async with (
        Runtime(metrics=MetricsConfig(port=ports[0])) as one,
        Runtime(metrics=MetricsConfig(port=ports[1])) as two,
    ):
        for rt in (one, two):
            rt.register("picky", Picky)
        await one.ask("picky/a", "x")
        for _ in range(3):
            await two.ask("picky/a", "y")
        first, second = [parse((await scrape(p))[2]) for p in ports]
    assert value(first, "actormem_commands_handled_total", command="str") == 1
    assert value(second, "actormem_commands_handled_total", command="str") == 3


async def test_a_port_in_use_is_an_error_naming_it() -> None:
    with taken_port() as port:
        rt = Runtime(metrics=MetricsConfig(port=port))
        with pytest.raises(
            ConfigError, match=f"metrics port {port} on 127.0.0.1 is already in use"
        ):
            await rt.__aenter__()
    assert not rt.is_open
    await rt.aclose()


async def test_without_a_port_nothing_is_recorded() -> None:
    async with Runtime() as rt:
        rt.register("picky", Picky)
        await rt.ask("picky/a", "x")
        assert rt.metrics is None


def test_a_distribution_counts_cumulatively_as_prometheus_reads_it() -> None:
    dist = Distribution((0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 3.0):
        dist.observe(seconds)
    assert dist.buckets() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert dist.count == 4 and dist.total == pytest.approx(3.65)


def test_the_config_refuses_a_port_out_of_range() -> None:
    with pytest.raises(ValueError, match=r"port must be within 0\.\.65535"):
        MetricsConfig(port=70000)


async def test_command_labels_are_bounded() -> None:
    port = free_port()
    kinds = [type(f"Command{i}", (), {}) for i in range(MAX_COMMAND_LABELS + 5)]
    async with Runtime(metrics=MetricsConfig(port=port)) as rt:
        rt.register("echo", Echo)
        for kind in kinds:
            await rt.ask("echo/a", kind())
        samples = parse((await scrape(port))[2])
    labelled = [k for k in samples if k[0] == "actormem_commands_handled_total"]
    assert len(labelled) == MAX_COMMAND_LABELS + 1
    assert value(samples, "actormem_commands_handled_total", command="other") == 5


@pytest.mark.slow
def test_prometheus_client_is_imported_only_when_a_port_is_set() -> None:
    code = (
        "import sys, actormem.actors.app.cli, actormem.runtime.redis.worker\n"
        "from actormem.actors import AppConfig, MemoryRuntime\n"
        "from actormem.runtime.config import MetricsConfig\n"
        "MemoryRuntime(AppConfig())\n"
        "off = 'prometheus_client' in sys.modules\n"
        "MemoryRuntime(AppConfig(metrics=MetricsConfig(port=9100)))\n"
        "print(off, 'prometheus_client' in sys.modules)"
    )
    out = printed(code)
    assert out.split() == ["False", "True"]
