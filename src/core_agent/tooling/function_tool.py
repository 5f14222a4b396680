"""``@tool``: turn a typed Python function into an ``ITool``.

The argument schema comes from the function's type hints (or from the single pydantic model it
takes), so what the model is told and what is validated are the same thing.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, get_args, get_origin, get_type_hints, overload

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from core_agent.contracts.errors import (
    ToolArgumentsError,
    ToolExecutionError,
    ToolRegistrationError,
)
from core_agent.contracts.tool import TOOL_NAME_PATTERN, Capability, ITool, ToolContext, ToolSpec

_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:$")
_ARG_SECTIONS = frozenset({"Args:", "Arguments:", "Parameters:"})
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def _split_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Summary text and per-argument descriptions from a Google-style docstring."""
    if not doc:
        return "", {}
    summary: list[str] = []
    arg_docs: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    arg_indent: int | None = None
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        if not line.startswith(" ") and _SECTION.match(stripped):
            section, current, arg_indent = stripped, None, None
            continue
        if section is None:
            summary.append(line)
        elif section in _ARG_SECTIONS and stripped:
            indent = len(line) - len(line.lstrip())
            match = _ARG_LINE.match(stripped)
            if match and (arg_indent is None or indent <= arg_indent):
                arg_indent, current = indent, match.group(1)
                arg_docs[current] = match.group(2)
            elif current is not None:
                arg_docs[current] = f"{arg_docs[current]} {stripped}".strip()
    return "\n".join(summary).strip(), arg_docs


class FunctionTool(ITool):
    """An ``ITool`` backed by a Python function, sync or async.

    Sync functions run in a worker thread so they never block the event loop. A parameter
    annotated ``ToolContext`` (or ``ToolContext[MyDeps]``) receives the call's context, with
    the host's ``create_kernel(deps=...)`` as ``ctx.deps``; it is left out of the schema.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        capabilities: Iterable[Capability | str] = (),
        idempotent: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        self._func = func
        tool_name = name or func.__name__
        if not TOOL_NAME_PATTERN.match(tool_name):
            raise ToolRegistrationError(
                f"tool name {tool_name!r} must match {TOOL_NAME_PATTERN.pattern}"
            )
        summary, arg_docs = _split_docstring(func.__doc__)
        tool_description = description or summary
        if not tool_description:
            raise ToolRegistrationError(
                f"tool {tool_name!r} needs a description: give a docstring or description="
            )
        self._is_async = inspect.iscoroutinefunction(func)
        self._context_param: str | None = None
        self._deps_type: Any = None
        self._model_param: str | None = None
        self._args_model = self._build_args_model(tool_name, func, arg_docs)
        parameters = self._args_model.model_json_schema()
        parameters.pop("title", None)
        self._spec = ToolSpec(
            name=tool_name,
            description=tool_description,
            parameters=parameters,
            capabilities=frozenset(Capability(c) for c in capabilities),
            idempotent=idempotent,
            timeout_s=timeout_s,
        )
        functools.update_wrapper(self, func)

    def _build_args_model(
        self, tool_name: str, func: Callable[..., Any], arg_docs: dict[str, str]
    ) -> type[BaseModel]:
        try:
            hints = get_type_hints(func, include_extras=True)
        except Exception as exc:
            raise ToolRegistrationError(
                f"tool {tool_name!r}: unresolvable type hints: {exc}"
            ) from exc
        fields: dict[str, Any] = {}
        for param in inspect.signature(func).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ToolRegistrationError(f"tool {tool_name!r}: *args/**kwargs are not supported")
            annotation = hints.get(param.name, inspect.Parameter.empty)
            if annotation is ToolContext or get_origin(annotation) is ToolContext:
                self._context_param = param.name
                self._deps_type = next(iter(get_args(annotation)), None)
                continue
            if annotation is inspect.Parameter.empty:
                raise ToolRegistrationError(
                    f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation"
                )
            default = ... if param.default is inspect.Parameter.empty else param.default
            described = param.name in arg_docs
            fields[param.name] = (
                annotation,
                Field(default, description=arg_docs[param.name]) if described else default,
            )
        if len(fields) == 1:
            ((only_name, (annotation, _)),) = fields.items()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                self._model_param = only_name
                return annotation
        model: type[BaseModel] = create_model(
            f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
        return model

    @property
    def spec(self) -> ToolSpec:
        """The tool's name, description, schema and capabilities."""
        return self._spec

    def deps_mismatch(self, deps: object) -> str | None:
        """Why ``deps`` is not what the function's ``ToolContext[...]`` asks for, if it is not.

        Only a plain class is checked (``ToolContext[Notebook]``); ``Any``, unions, protocols
        that are not runtime-checkable and the like are taken on trust.
        """
        expected = self._deps_type
        kind = get_origin(expected) or expected
        if expected is None or expected is Any or not isinstance(kind, type):
            return None
        try:
            if isinstance(deps, kind):
                return None
        except TypeError:  # a protocol that isinstance cannot check
            return None
        given = "no deps" if deps is None else f"deps of type {type(deps).__qualname__}"
        return (
            f"tool {self._spec.name!r} asks for deps of type {kind.__qualname__} "
            f"(ToolContext[{kind.__qualname__}]), but the kernel was given {given}: "
            "pass create_kernel(deps=...)"
        )

    def validate_arguments(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """Validate against the derived model; errors name the argument at fault."""
        try:
            instance = self._args_model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise ToolArgumentsError.from_validation_error(self._spec.name, exc) from exc
        if self._model_param is not None:
            return {self._model_param: instance}
        return {name: getattr(instance, name) for name in type(instance).model_fields}

    async def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Call the function; sync functions in a worker thread."""
        kwargs = dict(arguments)
        if self._context_param is not None:
            mismatch = self.deps_mismatch(context.deps)
            if mismatch is not None:
                raise ToolExecutionError(mismatch, tool_name=self._spec.name)
            kwargs[self._context_param] = context
        if self._is_async:
            result = await self._func(**kwargs)
        else:
            result = await _run_in_thread(
                functools.partial(self._func, **kwargs), context, self._spec.name
            )
        return render_tool_output(result)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (for tests and reuse)."""
        return self._func(*args, **kwargs)


async def _run_in_thread(call: Callable[[], Any], context: ToolContext, name: str) -> Any:
    """Run a sync function in a worker thread, reporting work that outlives a cancel.

    A cancel (time limit, task canceled) cannot stop the thread, so it is waited for a little
    more, and what it did is reported (see ``UninterruptibleWork``): the outcome after the
    cut, or ``still_running`` and a late report from the thread when it ends.
    """
    work = context.work
    done = threading.Event()
    outcome: list[str] = []

    def target() -> Any:
        try:
            value = call()
        except GeneratorExit as exc:
            outcome.append("raised GeneratorExit")
            # Handed to the event loop as it is, it would be thrown into the awaiting task,
            # which closes every coroutine it awaits through: the host's, not just the tool.
            raise ToolExecutionError(
                f"tool {name!r} failed: it raised GeneratorExit", tool_name=name
            ) from exc
        except BaseException as exc:
            outcome.append(f"raised {type(exc).__name__}: {exc}")
            raise
        else:
            outcome.append(render_tool_output(value))
            return value
        finally:
            with work.lock:
                done.set()
                late = work.still_running and work.report_late is not None
            if late and work.report_late is not None:
                work.report_late(outcome[-1] if outcome else "ended")

    try:
        # Abandoned on cancel, so a time limit returns control even if the function hangs.
        return await anyio.to_thread.run_sync(target, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(done.wait, work.grace_s)
            with work.lock:
                if done.is_set():
                    work.outcome = outcome[-1] if outcome else "ended"
                else:
                    work.still_running = True
        raise


def render_tool_output(result: Any) -> str:
    """Text for the model: strings as they are, models and data as JSON."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return json.dumps(result, ensure_ascii=False, default=str)


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    capabilities: Iterable[Capability | str] = (),
    idempotent: bool = False,
    timeout_s: float | None = None,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    capabilities: Iterable[Capability | str] = (),
    idempotent: bool = False,
    timeout_s: float | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool of a typed function, with or without options.

    Examples:
        ``@tool`` on ``def add(a: int, b: int) -> int`` gives a tool ``add`` whose schema
        requires two integers; ``@tool(capabilities={"read"}, idempotent=True)`` declares
        what the tool does for the policy engine. A function taking a single pydantic model
        uses that model as its schema. A parameter annotated ``ToolContext`` receives the
        calling task's context and is not part of the schema; ``ToolContext[Notebook]``
        types ``ctx.deps``, the object the host passed as ``create_kernel(deps=...)``.
    """

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            capabilities=capabilities,
            idempotent=idempotent,
            timeout_s=timeout_s,
        )

    return wrap(func) if func is not None else wrap
