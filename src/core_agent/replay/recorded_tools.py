"""The current tools as a rerun uses them, on calls that come from a recording.

With recorded results (``RecordedTool``) each wraps the current tool of that name: its spec,
argument validation and own judgement of a call are today's (so the current policy grades
the call as it would now), and only the work is replaced by the recorded result of the same
call (matched by call id and tool name, in order). An error the tool raised then is raised
again, under the same error name, so the model is shown the same text.

With live tools (``LiveTool``) the current tool runs for real, but on arguments read back from
the stores, where secrets were redacted: a call that holds the mark is refused
(``refuse_redacted_call``, the rule a resumed turn follows too) rather than run with the
placeholder.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from core_agent.contracts.errors import ToolError, ToolExecutionError
from core_agent.contracts.tool import ITool, ToolAssessment, ToolContext, ToolSpec
from core_agent.contracts.tool_registry import IToolRegistry
from core_agent.replay.recording import Recording
from core_agent.safety.redaction import refuse_redacted_call

_ERROR_PREFIX = "Error: "
"""How the tool runner starts the text of an error result (``tool_runner._error``)."""


@cache
def _error_class(name: str) -> type[ToolError]:
    """A ``ToolError`` class called ``name``: the runner reports errors by class name."""
    if not name.isidentifier():
        return ToolExecutionError
    return type(name, (ToolError,), {"__doc__": "A tool error, as the recording names it."})


class RecordedTool(ITool):
    """The current tool ``inner``, whose work is replaced by the recorded results."""

    def __init__(self, inner: ITool, recording: Recording) -> None:
        self._inner = inner
        self._recording = recording

    @property
    def spec(self) -> ToolSpec:
        """The current tool's spec."""
        return self._inner.spec

    def validate_arguments(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """The current tool's validation."""
        return self._inner.validate_arguments(arguments)

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """The current tool's own judgement of the call."""
        return self._inner.assess(arguments, context)

    async def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """The recorded result of this call.

        Raises:
            ToolError: The recorded call failed (raised again under its recorded name), or
                the recording has no result for this call.
        """
        name = self.spec.name
        result = self._recording.take_tool_result(context.call_id, name)
        if result is None:
            raise ToolExecutionError(
                f"replay: the recording has no result for call {context.call_id} of {name}",
                tool_name=name,
            )
        if result.is_error:
            message = result.content.removeprefix(_ERROR_PREFIX)
            raise _error_class(result.error_type or "ToolExecutionError")(message, tool_name=name)
        return result.content


class LiveTool(ITool):
    """The current tool ``inner``, run for real on recorded calls that hold no redacted secret."""

    def __init__(self, inner: ITool) -> None:
        self._inner = inner

    @property
    def spec(self) -> ToolSpec:
        """The current tool's spec."""
        return self._inner.spec

    def validate_arguments(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """The current tool's validation, of arguments that hold no redaction mark.

        Raises:
            RedactedArgumentsError: A secret was redacted out of the recorded arguments.
            ToolArgumentsError: The current tool's validation failed.
        """
        refuse_redacted_call(self.spec.name, arguments)
        return self._inner.validate_arguments(arguments)

    def assess(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolAssessment:
        """The current tool's own judgement of the call."""
        return self._inner.assess(arguments, context)

    async def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """The current tool's work."""
        return await self._inner.invoke(arguments, context)


class _ReplayRegistry(IToolRegistry):
    """The current registry's tools, each wrapped for the rerun (``_wrap``)."""

    def __init__(self, inner: IToolRegistry) -> None:
        self._inner = inner
        self._tools = {name: self._wrap(inner.get(name)) for name in inner.names()}

    @abc.abstractmethod
    def _wrap(self, tool: ITool) -> ITool:
        """The rerun's stand-in of ``tool``."""

    def register(self, tool: ITool) -> None:
        """Add ``tool`` to the current registry, wrapped as the others are.

        A rerun adds the nested agents it was given once its kernel is built
        (``agent_as_tool``): their calls come from the recording too.

        Raises:
            ToolRegistrationError: The name is invalid or already registered.
        """
        self._inner.register(tool)
        self._tools[tool.spec.name] = self._wrap(tool)

    def get(self, name: str) -> ITool:
        """The rerun's stand-in of the current tool ``name``.

        Raises:
            ToolNotFoundError: No current tool has that name.
        """
        self._inner.get(name)  # the current registry's error, with its list of names
        return self._tools[name]

    def specs(self, names: Iterable[str] | None = None) -> list[ToolSpec]:
        """The current tools' specs."""
        return self._inner.specs(names)

    def names(self) -> list[str]:
        """The current tools' names."""
        return self._inner.names()


class RecordedToolRegistry(_ReplayRegistry):
    """The current registry's tools, each a ``RecordedTool`` over the same recording."""

    def __init__(self, inner: IToolRegistry, recording: Recording) -> None:
        self._recording = recording
        super().__init__(inner)

    def _wrap(self, tool: ITool) -> ITool:
        return RecordedTool(tool, self._recording)


class LiveToolRegistry(_ReplayRegistry):
    """The current registry's tools, each a ``LiveTool``."""

    def _wrap(self, tool: ITool) -> ITool:
        return LiveTool(tool)
