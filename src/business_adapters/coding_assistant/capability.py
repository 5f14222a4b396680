"""The coding assistant (seed 004) as a business capability: a workspace tool pack.

Seed 004 merges two tool systems into one registry. Here that registry is the kernel's: the
pack enables the installed file and command tools by name (``read_file``, ``write_file``,
``edit_file``, ``grep``, ``run_command``, from the ``core_agent.tools`` entry points) and
adds only ``glob``, which none of them does. All of them act through the call's sandbox, so
the workspace roots, protected paths and confinement are the kernel's. It brings a coding
system prompt (``prompts/system.md``) and policy defaults (``policy.toml``) and no context:
the app's context is untrusted data and would taint every task from its start.
"""

from __future__ import annotations

from importlib import resources

from business_adapters.coding_assistant.glob_tool import GlobTool
from core_agent.contracts.business_capability_provider import IBusinessCapabilityProvider
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ITool

INSTALLED_TOOLS = ("read_file", "write_file", "edit_file", "grep", "run_command")


def _resource(*parts: str) -> str:
    path = resources.files("business_adapters.coding_assistant").joinpath(*parts)
    return path.read_text("utf-8")


class CodingAssistantCapability(IBusinessCapabilityProvider):
    """Read, write, exact edit, grep, glob and run_command in the workspace."""

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> CodingAssistantCapability:
        """No settings of its own: the workspace is ``AGENT_WORKSPACE_ROOTS``."""
        return cls()

    @property
    def name(self) -> str:
        """``coding_assistant``."""
        return "coding_assistant"

    def tools(self) -> list[ITool]:
        """``glob``."""
        return [GlobTool()]

    def installed_tools(self) -> list[str]:
        """The installed file and command tools the pack is made of."""
        return list(INSTALLED_TOOLS)

    def system_instructions(self) -> str:
        """The coding prompt (``prompts/system.md``)."""
        return _resource("prompts", "system.md")

    def policy_rules(self) -> str:
        """No force push; publishing, CI files and dependency manifests graded up."""
        return _resource("policy.toml")
