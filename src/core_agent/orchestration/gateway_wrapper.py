"""The base of the kernel's gateways that wrap another one and change only its answers."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from core_agent.contracts.llm_gateway import ILLMGateway


class GatewayWrapper(ILLMGateway):
    """``inner``'s model, window, warm-up and connections; subclasses give the answers.

    ``complete`` and ``stream`` stay abstract: a wrapper exists to change what they return.
    """

    def __init__(self, inner: ILLMGateway) -> None:
        self.inner = inner

    @property
    def model_name(self) -> str:
        """The inner gateway's model."""
        return self.inner.model_name

    def context_window(self) -> int | None:
        """The inner gateway's (see ``ILLMGateway.context_window``)."""
        return self.inner.context_window()

    def warm_up(self) -> None:
        """Warms the inner gateway (see ``ILLMGateway.warm_up``)."""
        self.inner.warm_up()

    def connections(self) -> AbstractAsyncContextManager[None]:
        """The inner gateway's (see ``ILLMGateway.connections``)."""
        return self.inner.connections()
