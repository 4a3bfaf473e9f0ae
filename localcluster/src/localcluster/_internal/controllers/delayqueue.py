"""A work queue of keys, each due at a time (client-go's delaying queue, without the rate limiter's state):
adding a key that is already queued keeps the earlier time; `run` hands due keys to the handler in order."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class DelayQueue(Generic[K]):
    def __init__(self) -> None:
        self._due: dict[K, float] = {}
        self._wake = asyncio.Event()

    def add(self, key: K, *, after: float = 0.0) -> None:
        when = time.monotonic() + max(0.0, after)
        if key not in self._due or self._due[key] > when:
            self._due[key] = when
            self._wake.set()

    def pop_due(self) -> list[K]:
        now = time.monotonic()
        due = sorted((k for k, when in self._due.items() if when <= now), key=lambda k: self._due[k])
        for key in due:
            del self._due[key]
        return due

    async def wait(self, *, poll: Callable[[], bool] = lambda: False) -> None:
        """Until a key is due (or `poll()` says there is other work)."""
        self._wake.clear()
        if poll():
            return
        delay = min(self._due.values(), default=time.monotonic() + 3600.0) - time.monotonic()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)

    def wake(self) -> None:
        self._wake.set()
