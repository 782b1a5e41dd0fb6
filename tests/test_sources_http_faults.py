"""The source against a fault-injecting HTTP server: every failure is NoData with the right reason."""

from __future__ import annotations

import time

import pytest

from planner.sources.prometheus import PrometheusSource
from planner.testing.ports import free_port
from planner.types import NoData, NoDataReason
from tests.support.prom_fixtures import fake_http  # noqa: F401 - fixture

SELECTORS = {"aggregated": '{role="x"}'}


def source(url: str, timeout_s: float = 2.0) -> PrometheusSource:
    return PrometheusSource(url, "vllm", SELECTORS, timeout_s=timeout_s, retries=1)


def test_nothing_listening_is_unreachable() -> None:
    got = source(f"http://127.0.0.1:{free_port()}").read(60, time.time())
    assert isinstance(got, NoData) and got.reason == NoDataReason.UNREACHABLE


def test_slower_than_the_timeout_is_timeout(fake_http) -> None:  # noqa: F811
    server = fake_http()
    server.delay_s = 1.5
    got = source(server.url, timeout_s=0.3).read(60, time.time())
    assert isinstance(got, NoData) and got.reason == NoDataReason.TIMEOUT, got


CASES = [
    ("http-503", 503, {"status": "error"}, NoDataReason.UNREACHABLE),
    ("http-400-bad-query", 400, {"status": "error", "errorType": "bad_data"}, NoDataReason.BAD_RESPONSE),
    ("not-json", 200, "<html>proxy login</html>", NoDataReason.BAD_RESPONSE),
    ("no-data-key", 200, {"status": "success"}, NoDataReason.BAD_RESPONSE),
    ("scalar", 200, {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}},
     NoDataReason.BAD_RESPONSE),
    ("empty-vector", 200, {"status": "success", "data": {"resultType": "vector", "result": []}},
     NoDataReason.EMPTY),
]


@pytest.mark.parametrize(("status", "body", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_answers(fake_http, status: int, body: object, reason: NoDataReason) -> None:  # noqa: F811
    server = fake_http()
    server.status, server.body = status, body
    got = source(server.url).read(60, time.time())
    assert isinstance(got, NoData) and got.reason == reason, got


def test_read_async_does_not_block_the_loop(fake_http) -> None:  # noqa: F811
    import asyncio

    server = fake_http()
    server.delay_s = 0.3
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    async def main() -> object:
        task = asyncio.create_task(ticker())
        got = await source(server.url).read_async(60, time.time())
        task.cancel()
        return got

    got = asyncio.run(main())
    assert isinstance(got, NoData) and got.reason == NoDataReason.EMPTY
    assert ticks > 3  # the loop kept running while the read waited on the network
