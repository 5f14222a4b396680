"""Port through which an application plugs its own capabilities into the kernel.

A capability provider is how an app (a reading app, a coding assistant) adds what the agent
needs to work in its domain, without touching the kernel: tools, the app's context for each
task, policy rules, system instructions and documents for retrieval. Providers register under
the ``core_agent.capabilities`` entry-point group (a factory taking ``AgentSettings``) and are
enabled by name with ``AGENT_CAPABILITIES=reader,coding_assistant``.

What the kernel does with each part (README, "Business capabilities"):

* ``tools`` and ``installed_tools`` join the tool registry (also when ``AGENT_TOOLS`` would
  leave the named ones out), and ``discovered_tools`` join it when tools are first listed;
* ``system_instructions`` follow the task's system prompt;
* ``context`` is asked once per task, before its first model call; its text reaches the model
  inside an untrusted-data block and marks the task tainted, like any outside content;
* ``policy_rules`` are merged with the kernel's rules, and can only make calls safer: their
  ``deny`` rules refuse like any other, their ``grade`` rules can raise a call's risk, never
  lower it;
* ``documents`` are ingested into the kernel's retrieval by ``core-agent ingest --capability
  NAME`` (idempotent: unchanged documents are skipped, vanished ones removed).

Every method but ``name`` has a default that contributes nothing, so an app implements only
what it offers.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass

from core_agent.contracts.tool import ITool
from shared.agent_protocol import TaskRequest


@dataclass(frozen=True, slots=True)
class CapabilityDocument:
    """One document an application offers for retrieval (``knowledge_search``).

    ``document_id`` is stable and unique within the capability (the kernel stores it as
    ``capability:<name>:<document_id>``); ``source`` is what a search hit shows as where the
    text comes from (a URL, or a reference the app's tools understand).
    """

    document_id: str
    text: str
    title: str | None = None
    source: str | None = None
    media_type: str = "text/plain"


class IBusinessCapabilityProvider(abc.ABC):
    """An application-specific bundle: tools, context, rules, instructions and documents."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Unique name of the bundle (its entry-point name), for configuration and traces."""

    def tools(self) -> list[ITool]:
        """Tools the application implements itself. Never blocks (open stores lazily).

        Their names must not clash with installed tools or the kernel's own
        (``ToolRegistrationError`` at start otherwise). The default is none.
        """
        return []

    def discovered_tools(self) -> list[ITool]:
        """Tools found by asking something outside the process (MCP servers); may block.

        Called at most once per kernel, the first time the kernel lists its tools (a task's
        first step), not when the kernel is built, so what it starts is started only when
        needed. A tool whose name is taken is left out with a warning. The default is none.
        """
        return []

    def installed_tools(self) -> list[str]:
        """Names of installed tools (``core_agent.tools`` entry points) this bundle uses.

        The kernel enables them with the bundle, so a bundle reuses installed tools instead of
        implementing them again. An unknown name stops start-up with
        ``ProviderNotFoundError``. The default is none.
        """
        return []

    def system_instructions(self) -> str:
        """Text appended to every task's system prompt; may be empty (the default).

        Domain vocabulary, how to use the tools. Trusted: it is the app's, not its users'.
        """
        return ""

    def policy_rules(self) -> str:
        """Policy rules in the kernel's TOML format; may be empty (the default).

        ``[[rule]]`` tables, as in ``AGENT_POLICY_FILE``. They can only make calls safer: a
        ``deny`` rule refuses the calls it matches; a ``grade`` rule raises the risk of the
        calls it matches (when any argument value matches, as for deny rules) to its
        ``risk`` if the kernel's own rules graded them lower, and never lowers one.
        ``network = true`` is refused: a capability cannot open the network to commands.
        Rules are named ``<capability>:<rule name>`` in decisions. A malformed file stops
        start-up with ``ConfigurationError``.
        """
        return ""

    async def context(self, request: TaskRequest) -> str | None:
        """What the application knows about the user's situation now, for this task.

        For a reading app, the article the user is reading. Asked once when the task starts
        (not again when it resumes); may wait on the application (it should answer promptly:
        the task's first model call waits for it). The text is shown to the model as
        untrusted data and marks the task tainted. ``None`` or empty adds nothing (the
        default). An exception is logged and traced, and the task goes on without it.
        """
        return None

    async def documents(self) -> AsyncIterator[CapabilityDocument]:
        """Every document the application wants searchable, one at a time.

        Read by ``core-agent ingest --capability NAME``: new and changed documents are
        ingested into the knowledge namespace, unchanged ones skipped (by content hash), and
        documents it no longer yields are removed from the index. An exception stops the
        ingestion, and then nothing is removed. The default yields none.
        """
        return
        yield  # an async generator that yields nothing

    async def close(self) -> None:
        """Release what the bundle opened (connections, files); the default does nothing.

        Called when the kernel closes.
        """
        return None
