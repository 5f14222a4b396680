"""Prompts as data: shipped files, overrides by name, checks at start, literal rendering."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import pytest

from core_agent.container import KernelContainer, create_kernel
from core_agent.contracts.errors import ConfigurationError, UsageError
from core_agent.contracts.llm_gateway import LLMRequest
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import Capability
from core_agent.contracts.untrusted import UNTRUSTED_NOTICE
from core_agent.memory.session_history import SessionTurn
from core_agent.prompts import PROMPT_SPECS, default_prompts, load_prompt_set
from core_agent.tooling.registry import ToolRegistry
from fakes.gateways import FakeRecordingGateway
from fakes.stores import (
    FakeCheckpointStore,
    FakeMemoryStore,
    FakeTaskStore,
    FakeToolCallLedger,
    FakeTraceStore,
)
from providers.sandbox.local_sandbox import LocalToolSandbox
from providers.scripted_gateway import ScriptedConversation, ScriptedLLMGateway, ScriptedTurn
from shared.agent_protocol import (
    SessionEntry,
    SystemMessage,
    TaskRequest,
    TaskStatus,
    UserMessage,
)

pytestmark = pytest.mark.anyio

# The texts the kernel sent before prompts became files: moving them must not change a word.
SHIPPED_SYSTEM = (
    "You are a capable assistant working inside an application. Use the available tools when "
    "they help you answer accurately; call several when needed. When you have the answer, "
    "reply with it directly and concisely."
)
SHIPPED_PLANNER_RULES = (
    "Rules: 1 to 8 steps; ids are short and unique; depends_on lists ids of earlier steps;\n"
    "no cycles; tool_hints name only available tools."
)
PLAN = json.dumps(
    {"steps": [{"id": "s1", "goal": "look", "depends_on": [], "success_criterion": "seen"}]}
)


def write_prompts(directory: Path, **texts: str) -> Path:
    directory.mkdir(exist_ok=True)
    for name, text in texts.items():
        (directory / f"{name}.md").write_text(text, encoding="utf-8")
    return directory


def system_of(request: LLMRequest) -> str:
    first = request.messages[0]
    assert isinstance(first, SystemMessage)
    return first.content


def opening(request: LLMRequest) -> str:
    return next(m.content for m in request.messages if isinstance(m, UserMessage))


@pytest.fixture
def wired(container: KernelContainer):
    """The container with fake stores, no tools, and a recording scripted model."""

    def build(
        *conversations: ScriptedConversation, **settings: object
    ) -> tuple[KernelContainer, FakeRecordingGateway]:
        if settings:
            container.settings.override(container.settings().model_copy(update=settings))
        container.task_store.override(FakeTaskStore())
        container.trace_store.override(FakeTraceStore())
        container.checkpoint_store.override(FakeCheckpointStore())
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.memory_store.override(FakeMemoryStore())
        container.tool_registry.override(ToolRegistry([]))
        gateway = FakeRecordingGateway(ScriptedLLMGateway(conversations=list(conversations)))
        container.llm_gateway.override(gateway)
        return container, gateway

    return build


def test_the_shipped_prompts_are_package_data_and_keep_their_texts() -> None:
    folder = resources.files("core_agent.prompts")
    for name in PROMPT_SPECS:
        assert folder.joinpath(f"{name}.md").is_file(), name
    prompts = default_prompts()
    assert prompts.render("system") == SHIPPED_SYSTEM
    planner = prompts.render("planner", max_steps=8)
    assert planner.startswith("You are the planner of an agent.")
    assert planner.endswith(SHIPPED_PLANNER_RULES)
    assert '{"steps": [{"id": "s1"' in planner  # braces need no escaping
    assert "at most 210 words." in prompts.render("summary", words=210)
    assert prompts.render("classifier").endswith(
        '{"sub_goals": <integer>, "dependent": <true|false>}'
    )
    assert all(p.source.startswith("the shipped ") for p in prompts)


async def test_an_override_directory_changes_what_the_model_receives(wired, tmp_path) -> None:
    directory = write_prompts(
        tmp_path / "prompts",
        system="You are the reading app's assistant.\n",
        planner="Plan in at most $max_steps steps. Reply with JSON.",
        step="Carry out the step.",
        synthesis="Answer from the results.",
    )
    container, gateway = wired(
        ScriptedConversation(match="^Plan this task:", turns=[ScriptedTurn(content=PLAN)]),
        ScriptedConversation(match=r"^Your step", turns=[ScriptedTurn(content="seen it")]),
        ScriptedConversation(match="^Write the final", turns=[ScriptedTurn(content="It is.")]),
        ScriptedConversation(match="^Say hi", turns=[ScriptedTurn(content="hi")]),
        prompts_dir=directory,
        plan_max_steps=4,
    )
    kernel = container.kernel()

    direct = await kernel.execute_task(TaskRequest(task="Say hi", force_mode="react"))
    assert direct.status is TaskStatus.SUCCEEDED, direct.error
    # The untrusted-data notice follows a configured system prompt too.
    assert system_of(gateway.requests[-1]) == (
        f"You are the reading app's assistant.\n\n{UNTRUSTED_NOTICE}"
    )

    planned = await kernel.execute_task(TaskRequest(task="Look", force_mode="plan_execute"))
    assert planned.status is TaskStatus.SUCCEEDED, planned.error
    by_opening = {opening(r).split()[0]: system_of(r) for r in gateway.requests[1:]}
    # Steps and the synthesis read tool output: the notice follows their prompts too.
    assert by_opening == {
        "Plan": "Plan in at most 4 steps. Reply with JSON.",
        "Your": f"Carry out the step.\n\n{UNTRUSTED_NOTICE}",
        "Write": f"Answer from the results.\n\n{UNTRUSTED_NOTICE}",
    }


async def test_a_request_system_prompt_wins_over_the_configured_one(wired, tmp_path) -> None:
    directory = write_prompts(tmp_path / "prompts", system="Configured.")
    container, gateway = wired(
        ScriptedConversation(match="^Say hi", turns=[ScriptedTurn(content="hi")]),
        prompts_dir=directory,
    )
    request = TaskRequest(task="Say hi", force_mode="react", system_prompt="Requested.")
    result = await container.kernel().execute_task(request)
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert system_of(gateway.requests[0]) == f"Requested.\n\n{UNTRUSTED_NOTICE}"


async def test_the_classifier_prompt_can_be_overridden(wired, tmp_path) -> None:
    directory = write_prompts(tmp_path / "prompts", classifier='Count goals; {"sub_goals": n}')
    container, gateway = wired(
        ScriptedConversation(
            match="", turns=[ScriptedTurn(content='{"sub_goals": 1, "dependent": false}')]
        ),
        prompts_dir=directory,
        router_classifier="model",
    )
    decision = await container.kernel().route(TaskRequest(task="Do it."))
    assert decision.features["classifier"] == "model"
    assert system_of(gateway.requests[0]) == 'Count goals; {"sub_goals": n}'


async def test_compaction_summarizes_with_the_configured_summary_prompt(
    container, tmp_path
) -> None:
    directory = write_prompts(tmp_path / "prompts", summary="Summarize in $words words.")
    container.settings.override(
        container.settings().model_copy(
            update={"prompts_dir": directory, "session_summary_tokens": 20}
        )
    )
    gateway = FakeRecordingGateway(ScriptedLLMGateway([ScriptedTurn(content="short")]))
    container.llm_gateway.override(gateway)
    sessions = container.sessions()
    assert sessions is not None
    entry = SessionEntry(
        session_id="s",
        seq=1,
        turn=1,
        task_id="t1",
        message=UserMessage(content="hi"),
        created_at=datetime.now(UTC),
    )
    try:
        summary = await sessions.compactor.summarize(None, [SessionTurn("t1", (entry,))])
    finally:
        await container.opened().close()
        await container.task_store().close()
    assert summary.text == "short"
    assert system_of(gateway.requests[0]) == f"Summarize in 14 words.\n\n{UNTRUSTED_NOTICE}"


async def test_braces_and_dollars_in_a_task_reach_the_model_literally(wired, tmp_path) -> None:
    task = "Fill {x} and {{y}} with $x, ${max_steps} and $$; then {0}."
    directory = write_prompts(tmp_path / "prompts", planner="At most $max_steps steps, as JSON.")
    container, gateway = wired(
        ScriptedConversation(match="^Plan this task:", turns=[ScriptedTurn(content=PLAN)]),
        ScriptedConversation(match=r"^Your step", turns=[ScriptedTurn(content="done")]),
        ScriptedConversation(match="^Write the final", turns=[ScriptedTurn(content="ok")]),
        ScriptedConversation(match="^Fill", turns=[ScriptedTurn(content="ok")]),
        prompts_dir=directory,
    )
    kernel = container.kernel()
    await kernel.execute_task(TaskRequest(task=task, force_mode="react"))
    await kernel.execute_task(TaskRequest(task=task, force_mode="plan_execute"))
    react, plan = gateway.requests[0], gateway.requests[1]
    assert opening(react) == task
    assert opening(plan).startswith(f"Plan this task:\n{task}\n")
    assert system_of(plan) == "At most 8 steps, as JSON."
    # A value is inserted as it is, never read as a template.
    prompts = load_prompt_set(write_prompts(tmp_path / "more", summary="In $words words."))
    assert prompts.render("summary", words="$words {x} $$") == "In $words {x} $$ words."


def test_an_unknown_placeholder_fails_at_start_naming_file_and_placeholder(tmp_path) -> None:
    directory = write_prompts(tmp_path / "prompts", planner="Use at most $max_step steps.")
    with pytest.raises(ConfigurationError) as caught:
        create_kernel(AgentSettings(data_dir=tmp_path / "data", prompts_dir=directory))
    message = str(caught.value)
    assert str(directory / "planner.md") in message
    assert "unknown placeholder $max_step;" in message
    assert "allows $max_steps" in message
    assert "\n" not in message
    assert not (tmp_path / "data" / "core_agent.db").exists()  # refused before any store


@pytest.mark.parametrize(
    ("files", "fragment"),
    [
        ({"system": "Hello $user."}, "system.md: unknown placeholder $user; the system prompt "
         "allows no placeholders"),
        ({"summary": "Summarize briefly."}, "summary.md: lacks the placeholder $words"),
        ({"planner": "At most {max_steps} steps."}, "placeholders are written $name"),
        ({"step": "Costs $5.\nDo it."}, "step.md, line 1: a '$' that starts no placeholder"),
        ({"step": "  \n\n"}, "step.md is empty"),
        ({"planer": "Plan."}, "planer.md is not a prompt file (did you mean planner.md?)"),
    ],
)  # fmt: skip
def test_bad_prompt_files_are_clear_configuration_errors(
    tmp_path, files: dict[str, str], fragment: str
) -> None:
    directory = write_prompts(tmp_path / "prompts", **files)
    with pytest.raises(ConfigurationError) as caught:
        load_prompt_set(directory)
    assert fragment in str(caught.value)


def test_an_unreadable_file_or_missing_directory_is_a_configuration_error(tmp_path) -> None:
    with pytest.raises(ConfigurationError, match=r"AGENT_PROMPTS_DIR=.* is not a directory"):
        load_prompt_set(tmp_path / "absent")
    directory = write_prompts(tmp_path / "prompts")
    (directory / "system.md").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(ConfigurationError, match=r"system\.md cannot be read"):
        load_prompt_set(directory)


def test_an_override_keeps_the_other_shipped_prompts(tmp_path) -> None:
    prompts = load_prompt_set(write_prompts(tmp_path / "p", step="Step.", **{".step.md.swp": ""}))
    assert prompts.render("step") == "Step."
    assert prompts["step"].source == str(tmp_path / "p" / "step.md")
    assert prompts.render("system") == SHIPPED_SYSTEM


def test_rendering_with_other_values_than_declared_is_a_bug() -> None:
    with pytest.raises(UsageError, match=r"planner prompt is rendered with \$max_steps"):
        default_prompts().render("planner")


def test_the_sandbox_protects_the_prompts_directory(tmp_path) -> None:
    directory = write_prompts(tmp_path / "prompts", system="Configured.")
    sandbox = LocalToolSandbox.from_settings(
        AgentSettings(
            data_dir=tmp_path / "data", workspace_roots=(tmp_path,), prompts_dir=directory
        )
    )
    verdict = sandbox.paths.check(directory / "system.md", Capability.WRITE)
    assert not verdict.allowed and "protected" in verdict.reason
    assert sandbox.paths.check(tmp_path / "notes.md", Capability.WRITE).allowed
