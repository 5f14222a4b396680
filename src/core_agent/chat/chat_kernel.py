"""The chat's kernel: the configured one, made a coding assistant for the workspace.

Built in a worker thread (``build_chat_kernel``) while the prompt already shows: importing
the container and opening the stores takes about a second, the model library longer (the
kernel loads it in its own thread when entered). ``/model`` builds another one the same way
and the chat swaps them between turns.

What the chat changes in the settings, and only this: the coding assistant capability is
enabled (the file and command tools, its prompt and policy), the workspace is the sandbox's
one root, and tasks left by dead processes are not taken over (``core-agent recover`` does
that). The settings themselves come from the environment and ``AGENT_ENV_FILE`` as for every
command, never from the workspace.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from core_agent.chat.project_instructions import (
    ProjectInstructions,
    read_project_instructions,
    system_prompt_with,
)
from core_agent.container import KernelContainer, use_agent_file
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import ToolSpec
from core_agent.kernel.agent_kernel import AgentKernel

if TYPE_CHECKING:
    from core_agent.agent_files import AgentDefinition

CODING_ASSISTANT = "coding_assistant"


def chat_settings(settings: AgentSettings, workspace: Path) -> AgentSettings:
    """``settings`` with the coding assistant on, ``workspace`` as the root, no recovery."""
    capabilities = settings.capabilities
    if CODING_ASSISTANT not in capabilities:
        capabilities = (*capabilities, CODING_ASSISTANT)
    return settings.model_copy(
        update={"capabilities": capabilities, "workspace_roots": (workspace,), "recovery": "off"}
    )


@dataclass(frozen=True, slots=True)
class ChatKernel:
    """A built kernel (not entered yet) with what the chat shows of it."""

    kernel: AgentKernel
    settings: AgentSettings
    model: str
    """The model's name as its gateway gives it."""
    tools: list[ToolSpec]
    base_prompt: str
    """The configured system prompt (``AGENT_PROMPTS_DIR`` or the shipped one)."""
    instructions: ProjectInstructions | None
    instructions_error: str | None = None
    """Why ``AGENTS.md`` could not be read, when it could not."""
    source_settings: AgentSettings | None = None
    """The settings it was built from, before the agent file and the chat's changes."""
    agent: AgentDefinition | None = None
    """The agent file (``--agent``) applied over ``source_settings``, if any."""

    @property
    def system_prompt(self) -> str:
        """The system prompt of every turn: the configured one and the project's instructions."""
        return system_prompt_with(self.base_prompt, self.instructions)

    @property
    def scripted_demo(self) -> bool:
        """Whether the model is the shipped demo (no model is configured)."""
        return (
            self.settings.gateway_name == "scripted" and self.settings.scripted_model_script is None
        )


def read_settings() -> AgentSettings:
    """The settings of every command (``AGENT_*`` and ``AGENT_ENV_FILE``).

    Raises:
        ConfigurationError: An unknown ``AGENT_*`` name, or a bad ``AGENT_ENV_FILE``.
        pydantic.ValidationError: A value that is not valid.
    """
    return AgentSettings()


def build_chat_kernel(
    settings: AgentSettings,
    workspace: Path,
    agent: AgentDefinition | None = None,
    *,
    model: str | None = None,
) -> ChatKernel:
    """The kernel ``settings`` describe, as a coding assistant in ``workspace`` (blocking).

    ``agent`` (``--agent``) is applied over ``settings`` as for ``run``: its model, prompt,
    tools, policy and limits; the coding assistant and the workspace are the chat's whatever
    the file says. ``model`` (``/model``) wins over both. Also imports what drawing a turn
    needs, so the first answer does not wait for it.

    Raises:
        CoreAgentError: A provider is not installed, a model is not configured, a prompt
            file is refused (as ``create_kernel`` raises them), or the agent file is refused.
    """
    source = settings
    container = KernelContainer()
    container.settings.override(settings)
    use_agent_file(container, agent)
    settings = chat_settings(container.settings(), workspace)
    if model is not None:
        settings = settings.model_copy(update={"model": model})
    container.settings.override(settings)
    prompts = container.prompts()
    tools = container.tool_registry().specs()
    kernel: AgentKernel = container.kernel()
    model = container.llm_gateway().model_name
    import core_agent.chat.approval_prompt
    import core_agent.chat.rendering  # noqa: F401

    return with_project_instructions(
        ChatKernel(
            kernel=kernel,
            settings=settings,
            model=model,
            tools=tools,
            base_prompt=prompts.render("system"),
            instructions=None,
            source_settings=source,
            agent=agent,
        ),
        workspace,
    )


def with_project_instructions(chat: ChatKernel, workspace: Path) -> ChatKernel:
    """``chat`` with ``workspace``'s ``AGENTS.md`` as it is now (read again)."""
    try:
        instructions = read_project_instructions(workspace)
    except OSError as exc:
        error = f"{exc.strerror or type(exc).__name__}: {exc.filename or workspace}"
        return replace(chat, instructions=None, instructions_error=error)
    return replace(chat, instructions=instructions, instructions_error=None)
