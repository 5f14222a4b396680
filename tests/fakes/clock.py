"""A clock that moves only when told, and a sleep that moves it instead of waiting."""

from __future__ import annotations


class FakeClock:
    """``clock()`` reads the time; ``await clock.sleep(s)`` records ``s`` and moves it on."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
