import threading
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from core_agent import tool
from core_agent.contracts.errors import (
    ToolArgumentsError,
    ToolExecutionError,
    ToolRegistrationError,
)
from core_agent.contracts.tool import Capability, ToolContext
from core_agent.tooling.registry import ToolRegistry

pytestmark = pytest.mark.anyio
CTX = ToolContext(task_id="t", session_id="s", call_id="c")


@tool
def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first addend.
        b: The second addend,
            two by default.
    """
    return a + b


def test_schema_is_derived_from_type_hints_and_docstring() -> None:
    spec = add.spec
    assert spec.name == "add"
    assert spec.description == "Add two integers."
    params = spec.parameters
    assert params["type"] == "object"
    assert params["required"] == ["a"]
    assert params["properties"]["a"]["type"] == "integer"
    assert params["properties"]["a"]["description"] == "The first addend."
    assert params["properties"]["b"]["default"] == 2
    assert params["properties"]["b"]["description"] == "The second addend, two by default."
    assert params["additionalProperties"] is False


async def test_validated_arguments_are_coerced_and_defaults_filled() -> None:
    args = add.validate_arguments({"a": "40"})
    assert await add.invoke(args, CTX) == "42"


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "a: Field required"),
        ({"a": "forty"}, "a: Input should be a valid integer"),
        ({"a": 1, "c": 3}, "c: Extra inputs are not permitted"),
    ],
)
def test_invalid_arguments_name_the_argument_at_fault(arguments: dict, fragment: str) -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        add.validate_arguments(arguments)
    assert fragment in str(caught.value)
    assert caught.value.tool_name == "add"


class SearchArgs(BaseModel):
    query: str = Field(min_length=1, description="What to look for.")
    mode: Literal["fast", "exact"] = "fast"


@tool(name="search_docs", capabilities={"read"}, idempotent=True)
async def search(args: SearchArgs, context: ToolContext) -> dict:
    """Search the documents."""
    return {"query": args.query, "mode": args.mode, "task": context.task_id}


async def test_a_pydantic_model_parameter_is_the_schema_and_context_is_injected() -> None:
    spec = search.spec
    assert spec.name == "search_docs"
    assert spec.capabilities == frozenset({Capability.READ})
    assert spec.idempotent is True
    assert set(spec.parameters["properties"]) == {"query", "mode"}
    assert "context" not in spec.parameters["properties"]
    out = await search.invoke(search.validate_arguments({"query": "wal"}), CTX)
    assert out == '{"query": "wal", "mode": "fast", "task": "t"}'
    with pytest.raises(ToolArgumentsError, match="mode"):
        search.validate_arguments({"query": "x", "mode": "slow"})


class Library:
    def __init__(self, books: list[str]) -> None:
        self.books = books


@tool
async def count_books(ctx: ToolContext[Library], prefix: str = "") -> int:
    """Count the host's books.

    Args:
        prefix: Only books whose title starts with it.
    """
    return sum(book.startswith(prefix) for book in ctx.deps.books)


async def test_a_typed_context_parameter_gets_the_deps_and_stays_out_of_the_schema() -> None:
    assert set(count_books.spec.parameters["properties"]) == {"prefix"}
    context = ToolContext[Library](
        task_id="t", session_id="s", call_id="c", deps=Library(["Emma", "Persuasion", "Evelina"])
    )
    assert await count_books.invoke(count_books.validate_arguments({"prefix": "E"}), context) == "2"


async def test_deps_of_the_wrong_type_fail_the_call_with_a_clear_error() -> None:
    """The model reads why (a host misconfiguration), instead of an AttributeError."""
    with pytest.raises(ToolExecutionError, match=r"asks for deps of type Library.*given no deps"):
        await count_books.invoke(count_books.validate_arguments({}), CTX)
    assert count_books.deps_mismatch(Library([])) is None


async def test_an_untyped_context_takes_any_deps() -> None:
    @tool
    def show(context: ToolContext) -> str:
        """Show the deps."""
        return repr(context.deps)

    assert show.deps_mismatch(None) is None and show.deps_mismatch(3) is None
    context = ToolContext(task_id="t", session_id="s", call_id="c", deps={"k": 1})
    assert await show.invoke({}, context) == "{'k': 1}"


async def test_sync_tools_run_off_the_event_loop_thread() -> None:
    @tool
    def where() -> str:
        """Report the thread."""
        return threading.current_thread().name

    assert await where.invoke(where.validate_arguments({}), CTX) != threading.current_thread().name


def test_annotated_descriptions_are_kept() -> None:
    @tool
    def greet(name: Annotated[str, Field(description="Who to greet.")]) -> str:
        """Greet someone."""
        return f"hi {name}"

    assert greet.spec.parameters["properties"]["name"]["description"] == "Who to greet."


@pytest.mark.parametrize(
    ("factory", "fragment"),
    [
        (lambda: tool(name="bad name!")(lambda x: x), "must match"),
        (lambda: tool(name="undocumented")(lambda x: x), "needs a description"),
    ],
)
def test_bad_tool_definitions_fail_at_registration(factory, fragment: str) -> None:
    with pytest.raises(ToolRegistrationError, match=fragment):
        factory()


def test_unannotated_parameters_are_refused() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        """Doc."""

    with pytest.raises(ToolRegistrationError, match="needs a type annotation"):
        tool(f)


def test_registry_refuses_duplicates_and_lists_names_on_a_miss() -> None:
    registry = ToolRegistry([add, search])
    with pytest.raises(ToolRegistrationError, match="already registered"):
        registry.register(add)
    with pytest.raises(Exception, match="available tools: add, search_docs"):
        registry.get("nope")
    assert [s.name for s in registry.specs()] == ["add", "search_docs"]
