"""A chain's block time as an observer measures it (no spec states it): for countdowns in
seconds (daemons, ``epoch watch``, the dashboard). Light: no chain client, no torch."""

from __future__ import annotations

import time
from collections import deque


class BlockClock:
    """Seconds per block as a node sees them: from the oldest and the newest (time, height) it
    observed within the last ``window_s`` seconds (a chain's block time, which no spec states)."""

    def __init__(self, window_s: float = 300.0) -> None:
        self._window = window_s
        self._seen: deque[tuple[float, int]] = deque()

    def observe(self, height: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._seen and self._seen[-1][1] == height:
            return
        self._seen.append((now, height))
        while len(self._seen) > 2 and now - self._seen[1][0] > self._window:
            self._seen.popleft()

    def seconds_per_block(self) -> float | None:
        """The observed block time; None until two heights were seen."""
        if len(self._seen) < 2:
            return None
        (t0, h0), (t1, h1) = self._seen[0], self._seen[-1]
        return (t1 - t0) / (h1 - h0) if h1 > h0 else None

    def seconds(self, blocks: int) -> float | None:
        per = self.seconds_per_block()
        return None if per is None else max(0, blocks) * per
