"""The current date and time, in any IANA time zone."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field

from core_agent.contracts.errors import ToolExecutionError
from core_agent.contracts.model_arguments_tool import ModelArgumentsTool
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ToolContext


class CurrentTimeArguments(BaseModel):
    """Arguments of ``current_time``."""

    model_config = ConfigDict(extra="forbid")

    timezone: str = Field(
        default="UTC", max_length=64, description="IANA time zone, e.g. 'Europe/Paris'."
    )


class CurrentTimeTool(ModelArgumentsTool[CurrentTimeArguments]):
    """Models do not know what time it is."""

    name: ClassVar[str] = "current_time"
    description: ClassVar[str] = (
        "Return the current date and time as ISO 8601 with the weekday, in the given IANA "
        "time zone (UTC by default)."
    )
    arguments_model: ClassVar[type[BaseModel]] = CurrentTimeArguments

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> CurrentTimeTool:
        """The clock needs no settings."""
        return cls()

    async def execute(self, args: CurrentTimeArguments, context: ToolContext) -> str:
        """Now, in ``args.timezone``."""
        try:
            zone = ZoneInfo(args.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ToolExecutionError(
                f"unknown time zone {args.timezone!r}", tool_name=self.name
            ) from exc
        now = datetime.now(zone)
        return f"{now.isoformat(timespec='seconds')} ({now:%A})"
