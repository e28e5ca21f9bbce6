"""The token bucket that paces a server's uplink (``ServerLimits.upload_rate``; issue 30's link
model): its arithmetic on a fake clock, the ASGI middleware on a fake clock and sleep, the
settings it refuses, and a paced server that still delivers every byte."""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import Response

from node.daemon import serving_limits
from node.http import PACED_PIECE, ServerLimits, TokenBucket, paced
from node.server import ServerThread

RATE = 1000.0
BURST = 500


def test_a_full_bucket_sends_its_burst_at_once_then_the_rate() -> None:
    bucket = TokenBucket(RATE, BURST)
    assert bucket.reserve(BURST, now=10.0) == 0
    assert bucket.reserve(1000, now=10.0) == pytest.approx(1.0)  # a second's worth, booked behind nothing
    # A booking behind that debt waits for it too: readers share the rate in booking order.
    assert bucket.reserve(500, now=10.0) == pytest.approx(1.5)
    # Once the debt is paid (at 11.5 s) the bucket refills at the rate, up to its burst only.
    assert bucket.reserve(100, now=11.6) == pytest.approx(0.0)
    assert bucket.reserve(BURST, now=1000.0) == 0
    assert bucket.reserve(1, now=1000.0) == pytest.approx(0.001)


def test_a_booking_larger_than_the_burst_waits_instead_of_failing() -> None:
    bucket = TokenBucket(RATE, BURST)
    assert bucket.reserve(10 * BURST, now=0.0) == pytest.approx(4.5)


def test_a_clock_that_goes_back_mints_no_tokens() -> None:
    bucket = TokenBucket(RATE, BURST)
    bucket.reserve(BURST, now=5.0)
    assert bucket.reserve(100, now=4.0) == pytest.approx(0.1)
    assert bucket.reserve(100, now=5.0) == pytest.approx(0.2)


@pytest.mark.parametrize("rate", [0, -1.0, math.nan, math.inf, True, "1000"])
def test_a_rate_that_is_not_a_positive_finite_number_is_refused(rate: Any) -> None:
    with pytest.raises(ValueError, match="upload rate must be a positive finite number"):
        TokenBucket(rate, BURST)
    with pytest.raises(ValueError, match="upload rate"):
        ServerLimits(upload_rate=rate)


@pytest.mark.parametrize("burst", [0, -5, math.inf, True])
def test_a_burst_that_is_not_a_positive_byte_count_is_refused(burst: Any) -> None:
    with pytest.raises(ValueError, match="upload burst"):
        TokenBucket(RATE, burst)
    with pytest.raises(ValueError, match="upload burst"):
        ServerLimits(upload_rate=RATE, upload_burst=burst)


def test_a_link_burst_is_whole_bytes() -> None:
    TokenBucket(RATE, 1.5)  # a bucket of lookups may hold a fraction
    with pytest.raises(ValueError, match="upload burst must be a positive whole number of bytes"):
        ServerLimits(upload_rate=RATE, upload_burst=1.5)  # type: ignore[arg-type]


def test_take_draws_only_what_is_at_hand_and_books_no_debt() -> None:
    bucket = TokenBucket(2.0, 2.0, what="lookup", unit="lookups")
    assert bucket.take(1, now=0.0) and bucket.take(1, now=0.0)
    assert not bucket.take(1, now=0.0)  # empty: refused, and the refusal costs nothing
    assert not bucket.take(1, now=0.25)  # half a token refilled
    assert bucket.take(1, now=0.5)
    assert bucket.take(2, now=100.0) and not bucket.take(0.5, now=100.0)  # refills up to its burst only
    with pytest.raises(ValueError, match="lookup rate must be a positive finite number of lookups per second"):
        TokenBucket(0, 1.0, what="lookup", unit="lookups")


def test_a_negative_booking_is_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(RATE, BURST).reserve(-1, now=0.0)


def test_servers_are_unpaced_unless_asked() -> None:
    assert ServerLimits().upload_rate is None
    assert serving_limits().upload_rate is None
    assert serving_limits(2e6).upload_rate == 2e6


class FakeTime:
    """A clock that only the fake sleep moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_middleware_sends_every_byte_in_order_in_pieces_at_the_rate() -> None:
    first, second = bytes(range(256)) * 700, b"tail" * 1000  # 179,200 + 4,000 bytes in two body messages

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": first, "more_body": True})
        await send({"type": "http.response.body", "body": second, "more_body": False})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    fake = FakeTime()
    bucket = TokenBucket(10_000.0, 50_000)
    asyncio.run(paced(app, bucket, clock=fake.clock, sleep=fake.sleep)({"type": "http"}, None, send))
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert sent[0]["type"] == "http.response.start"
    assert b"".join(m["body"] for m in bodies) == first + second
    assert all(len(m["body"]) <= PACED_PIECE for m in bodies)
    assert [m["more_body"] for m in bodies] == [True] * (len(bodies) - 1) + [False]
    # Everything past the burst went at the rate, on the fake clock.
    assert fake.now == pytest.approx((len(first) + len(second) - 50_000) / 10_000.0)


def test_the_middleware_leaves_other_messages_and_scopes_alone() -> None:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    fake = FakeTime()
    limited = paced(app, TokenBucket(1.0, 1), clock=fake.clock, sleep=fake.sleep)
    asyncio.run(limited({"type": "lifespan"}, None, send))
    asyncio.run(limited({"type": "http"}, None, send))
    assert seen == ["lifespan", "http"]
    assert sent == [{"type": "http.response.start", "status": 204, "headers": []},
                    {"type": "http.response.body", "body": b""}]
    assert fake.slept == []


def test_a_paced_server_delivers_whole_answers_to_concurrent_readers() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB: sixteen pieces each
    app = FastAPI()

    @app.get("/blob")
    def blob() -> Response:
        return Response(content=body, media_type="application/octet-stream")

    # Fast enough to keep the test quick; what is checked is that nothing is lost or reordered.
    limits = ServerLimits(upload_rate=64e6, upload_burst=PACED_PIECE)
    with ServerThread(app, limits=limits) as server, httpx.Client() as client, ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: client.get(f"{server.url}/blob"), range(3)))
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert all(a.content == body for a in answers)
