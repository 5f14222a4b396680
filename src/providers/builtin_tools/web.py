"""``http_fetch``: GET a public URL through the sandbox's SSRF guard."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.model_arguments_tool import ModelArgumentsTool
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import Capability, ToolContext
from providers.builtin_tools.files import sandbox_of


class HttpFetchArguments(BaseModel):
    """Arguments of ``http_fetch``."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1, max_length=4000, description="An http(s) URL.")
    max_chars: int = Field(default=20_000, ge=100, le=200_000)


class HttpFetchTool(ModelArgumentsTool[HttpFetchArguments]):
    """Fetch a web page or API response."""

    name: ClassVar[str] = "http_fetch"
    description: ClassVar[str] = (
        "GET an http(s) URL and return the status and the body text. Private and local "
        "addresses are refused."
    )
    arguments_model: ClassVar[type[BaseModel]] = HttpFetchArguments
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.NETWORK})
    idempotent: ClassVar[bool] = True

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> HttpFetchTool:
        """No settings needed (limits live in the sandbox)."""
        return cls()

    async def execute(self, args: HttpFetchArguments, context: ToolContext) -> str:
        """Status line, final URL, then the body (cut at ``max_chars``)."""
        result = await sandbox_of(context, self.name).fetch(args.url)
        body = result.text[: args.max_chars]
        cut = result.truncated or len(result.text) > args.max_chars
        return (
            f"status: {result.status}\nurl: {result.url}\n"
            f"content-type: {result.headers.get('content-type', '')}\n\n{body}"
            + ("\n[... body truncated ...]" if cut else "")
        )
