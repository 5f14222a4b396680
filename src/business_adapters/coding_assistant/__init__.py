"""A coding assistant's tool pack: read, write, exact edit, grep, glob and run_command.

Enable with ``AGENT_CAPABILITIES=coding_assistant``; the workspace is
``AGENT_WORKSPACE_ROOTS``. See the README, "Business capabilities".
"""

from business_adapters.coding_assistant.capability import CodingAssistantCapability
from business_adapters.coding_assistant.glob_tool import GlobTool

__all__ = ["CodingAssistantCapability", "GlobTool"]
