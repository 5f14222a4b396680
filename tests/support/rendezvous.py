"""A barrier for proving that things run at the same time (and failing, not hanging, if not)."""

import anyio


class Rendezvous:
    def __init__(self, parties: int, *, timeout_s: float = 5.0) -> None:
        self.parties, self.arrived, self.event = parties, 0, anyio.Event()
        self.timeout_s = timeout_s

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived >= self.parties:
            self.event.set()
        with anyio.fail_after(self.timeout_s):  # one-after-another would wait here forever
            await self.event.wait()
