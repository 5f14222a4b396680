"""Plan-and-execute, driven by scripted conversations through the container."""

import json

import pytest

from core_agent import tool
from core_agent.contracts.planner import Plan, PlanStep
from core_agent.orchestration.planner import check_plan
from core_agent.tooling.registry import ToolRegistry
from fakes.stores import FakeCheckpointStore, FakeTaskStore, FakeToolCallLedger, FakeTraceStore
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedError,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import ApprovalDecision, TaskRequest, TaskStatus
from support.rendezvous import Rendezvous

pytestmark = pytest.mark.anyio

TASK = "Collect the two reports, then merge them into one summary."


rendezvous = Rendezvous(2)


@tool
async def collect(report: str) -> str:
    """Collect a report; returns once both collectors are running."""
    await rendezvous.wait()
    return f"{report}: 42 items"


def plan_json(*steps: tuple[str, list[str]]) -> str:
    return json.dumps(
        {
            "steps": [
                {
                    "id": sid,
                    "goal": f"do {sid}",
                    "depends_on": deps,
                    "tool_hints": ["collect", "nope"],
                    "success_criterion": "done",
                }
                for sid, deps in steps
            ]
        }
    )


def conv(match: str, *turns: ScriptedTurn) -> ScriptedConversation:
    return ScriptedConversation(match=match, turns=list(turns))


def say(text: str) -> ScriptedTurn:
    return ScriptedTurn(content=text)


def fail(message: str) -> ScriptedTurn:
    return ScriptedTurn(error=ScriptedError(message=message, status_code=500))


def use(name: str, **arguments) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedToolCall(name=name, arguments=arguments)])


@pytest.fixture
def kernel_with(container):
    def build(*conversations: ScriptedConversation, **settings):
        global rendezvous
        rendezvous = Rendezvous(2)
        if settings:
            container.settings.override(container.settings().model_copy(update=settings))
        stores = FakeTaskStore(), FakeTraceStore(), FakeCheckpointStore()
        container.task_store.override(stores[0])
        container.trace_store.override(stores[1])
        container.checkpoint_store.override(stores[2])
        container.tool_call_ledger.override(FakeToolCallLedger())
        container.tool_registry.override(ToolRegistry([collect]))
        container.llm_gateway.override(ScriptedLLMGateway(conversations=list(conversations)))
        return container.kernel(), *stores

    return build


def spans_named(traces, kind: str) -> dict:
    return {s.name: s for s in traces.spans if s.kind == kind}


async def test_independent_steps_overlap_and_the_dependent_one_waits(kernel_with) -> None:
    kernel, tasks, traces, checkpoints = kernel_with(
        conv(r"^Plan this task:", say(plan_json(("a", []), ("b", []), ("c", ["a", "b"])))),
        conv(r"^Your step \(a\)", use("collect", report="north"), say("north has 42")),
        conv(r"^Your step \(b\)", use("collect", report="south"), say("south has 42")),
        conv(r"^Your step \(c\)(?s:.*)north has 42(?s:.*)south has 42", say("84 in total")),
        conv(r"^Write the final answer(?s:.*)84 in total", say("Both reports: 84 items.")),
    )
    result = await kernel.execute_task(TaskRequest(task=TASK))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == "Both reports: 84 items."

    steps = spans_named(traces, "step")
    a, b, c = steps["a"], steps["b"], steps["c"]
    assert a.started_at < b.ended_at and b.started_at < a.ended_at  # a and b overlap
    assert c.started_at >= max(a.ended_at, b.ended_at)  # c starts after both end
    run = spans_named(traces, "run")["run"]
    assert {a.parent_span_id, b.parent_span_id, c.parent_span_id} == {run.span_id}
    tool_spans = [s for s in traces.spans if s.kind == "tool"]
    assert {s.parent_span_id for s in tool_spans} == {a.span_id, b.span_id}

    kinds = [e.kind for e in tasks.events[result.task_id]]
    assert kinds[:3] == ["task.queued", "task.started", "task.strategy_selected"]
    assert tasks.events[result.task_id][2].strategy == "plan_execute"
    assert kinds.count("plan.step_started") == 3 and kinds.count("plan.step_completed") == 3
    plan_event = next(e for e in tasks.events[result.task_id] if e.kind == "plan.created")
    assert plan_event.steps[0]["tool_hints"] == ["collect"]  # the unknown hint was dropped

    saves = [
        state
        for task_id, key, state in checkpoints.history
        if task_id == result.task_id and key == "plan_execute" and state["phase"] == "executing"
    ]
    assert [sorted(s["results"]) for s in saves] in (
        [[], ["a"], ["a", "b"], ["a", "b", "c"]],
        [[], ["b"], ["a", "b"], ["a", "b", "c"]],
    )


async def test_three_invalid_plans_fall_back_to_react_and_the_trace_says_why(kernel_with) -> None:
    kernel, tasks, traces, _ = kernel_with(
        conv(
            r"^Plan this task:",
            say(plan_json(("a", ["b"]), ("b", ["a"]))),
            say(plan_json(("a", ["ghost"]))),
            say("Sure! Step one, gather the reports; step two, merge them."),
        ),
        conv(r"^Collect the two reports", say("Merged summary from the fallback.")),
    )
    result = await kernel.execute_task(TaskRequest(task=TASK, force_mode="plan_execute"))
    assert result.status is TaskStatus.SUCCEEDED
    assert result.output == "Merged summary from the fallback."

    events = tasks.events[result.task_id]
    fallback = next(e for e in events if e.kind == "task.strategy_fallback")
    assert (fallback.from_strategy, fallback.to_strategy) == ("plan_execute", "react")
    assert "no valid plan after 3 attempts" in fallback.reason
    plan_span = spans_named(traces, "planning")["plan"]
    assert plan_span.status == "error"
    refusals = plan_span.attributes["refusals"]
    assert len(refusals) == 3
    assert "cycle" in refusals[0]
    assert "unknown steps: ghost" in refusals[1]
    assert "not a valid plan object" in refusals[2]
    assert spans_named(traces, "planning")["fallback_react"].attributes["reason"] == fallback.reason


async def test_a_failed_step_is_replanned(kernel_with) -> None:
    kernel, tasks, traces, _ = kernel_with(
        conv(r"^Plan this task:(?s:(?!Earlier attempt).)*$", say(plan_json(("a", [])))),
        conv(r"Earlier attempt", say(plan_json(("r1", [])))),
        conv(r"^Your step \(a\)", fail("upstream exploded")),
        conv(r"^Your step \(r1\)", say("recovered")),
        conv(r"^Write the final answer", say("Done after a replan.")),
    )
    result = await kernel.execute_task(TaskRequest(task=TASK, force_mode="plan_execute"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == "Done after a replan."
    revisions = [e.revision for e in tasks.events[result.task_id] if e.kind == "plan.created"]
    assert revisions == [0, 1]
    replan = [s for s in traces.spans if s.kind == "planning" and s.name == "plan"][1]
    assert "step 'a' failed" in replan.attributes["feedback"]
    assert "upstream exploded" in replan.attributes["feedback"]


def failing_everywhere() -> list[ScriptedConversation]:
    return [
        conv(r"use the mirror", say(plan_json(("m", [])))),
        conv(r"^Plan this task:", say(plan_json(("a", [])))),
        conv(r"^Your step \(m\)", say("mirror data")),
        conv(r"^Your step", fail("source offline")),
        conv(r"^Write the final answer", say("Summary from the mirror.")),
        conv(r"^Collect the two reports", fail("still offline")),
    ]


async def test_repeated_failure_waits_for_a_human_then_resumes(kernel_with) -> None:
    kernel, tasks, _, _ = kernel_with(*failing_everywhere())
    result = await kernel.execute_task(TaskRequest(task=TASK, force_mode="plan_execute"))
    assert result.status is TaskStatus.WAITING_APPROVAL
    assert tasks.tasks[result.task_id].status is TaskStatus.WAITING_APPROVAL
    (pending,) = await kernel.pending_approvals()
    assert pending.request_id == result.pending_approval
    assert "failed repeatedly" in pending.question
    assert "source offline" in pending.question and "still offline" in pending.question

    resumed = await kernel.resolve_approval(
        pending.request_id,
        ApprovalDecision(
            request_id=pending.request_id, approved=True, reason="use the mirror instead"
        ),
    )
    assert resumed.status is TaskStatus.SUCCEEDED, resumed.error
    assert resumed.output == "Summary from the mirror."
    assert await kernel.pending_approvals() == []
    kinds = [e.kind for e in tasks.events[result.task_id]]
    waiting = kinds.index("task.waiting_approval")
    assert kinds[waiting - 1] == "approval.requested"
    assert kinds[waiting + 1 : waiting + 3] == ["approval.resolved", "task.resumed"]
    assert kinds[-1] == "task.succeeded"
    with pytest.raises(Exception, match="no task is waiting"):
        await kernel.resolve_approval(
            pending.request_id, ApprovalDecision(request_id=pending.request_id, approved=True)
        )


async def test_a_denied_question_fails_the_task(kernel_with) -> None:
    kernel, tasks, traces, _ = kernel_with(*failing_everywhere())
    result = await kernel.execute_task(TaskRequest(task=TASK, force_mode="plan_execute"))
    denied = await kernel.resolve_approval(
        result.pending_approval,
        ApprovalDecision(request_id=result.pending_approval, approved=False, reason="not worth it"),
    )
    assert denied.status is TaskStatus.FAILED
    assert "not worth it" in denied.error
    assert tasks.tasks[result.task_id].status is TaskStatus.FAILED
    # The trace ends too: the human's answer, and the root with the failure.
    (root,) = [s for s in traces.spans if s.parent_span_id is None]
    assert root.kind == "task" and root.status == "error" and "not worth it" in root.error
    (answer,) = [s for s in traces.spans if s.kind == "approval"]
    assert answer.name == "question" and answer.attributes["approved"] is False
    assert answer.parent_span_id == root.span_id


@pytest.mark.parametrize(
    ("steps", "fragment"),
    [
        ([("a", ["a"])], "depends on itself"),
        ([("a", ["b"]), ("b", ["c"]), ("c", ["a"])], "cycle"),
        ([("a", []), ("a", [])], "duplicate step ids: a"),
        ([("a", ["zz"])], "unknown steps: zz"),
        ([(f"s{i}", []) for i in range(9)], "at most 8"),
    ],
)
def test_unrunnable_plans_are_refused(steps, fragment) -> None:
    plan = Plan(steps=[PlanStep(id=i, goal="g", depends_on=d) for i, d in steps])
    assert any(fragment in problem for problem in check_plan(plan, max_steps=8))


def test_a_valid_plan_passes() -> None:
    plan = Plan(steps=[PlanStep(id="a", goal="g"), PlanStep(id="b", goal="g", depends_on=["a"])])
    assert check_plan(plan, max_steps=8) == []


async def test_planner_calls_nest_under_the_planning_span(kernel_with) -> None:
    kernel, _, traces, _ = kernel_with(
        conv(r"^Plan this task:", say(plan_json(("a", [])))),
        conv(r"^Your step", say("did a")),
        conv(r"^Write the final answer", say("ok")),
    )
    await kernel.execute_task(TaskRequest(task=TASK, force_mode="plan_execute"))
    plan_span = spans_named(traces, "planning")["plan"]
    planner_calls = [
        s for s in traces.spans if s.kind == "llm" and s.attributes.get("purpose") == "plan"
    ]
    assert [s.parent_span_id for s in planner_calls] == [plan_span.span_id]
    assert planner_calls[0].tokens_in > 0


async def test_a_resumed_plan_skips_finished_steps_and_passes_on_the_guidance(container) -> None:
    from fakes.gateways import FakeRecordingGateway

    container.settings.override(container.settings().model_copy(update={"plan_max_replans": 0}))
    gateway = FakeRecordingGateway(
        ScriptedLLMGateway(
            conversations=[
                conv(r"^Plan this task:", say(plan_json(("a", []), ("b", ["a"])))),
                conv(r"^Your step \(a\)", say("a is done")),
                conv(
                    r"^Your step \(b\)(?s:.*)Guidance from a human(?s:.*)try the archive",
                    say("b done from the archive"),
                ),
                conv(r"^Your step \(b\)", fail("b's source is down")),
                conv(r"^Write the final answer", say("Finished with the archive.")),
                conv(r"^Collect the two reports", fail("still down")),
            ]
        )
    )
    tasks, traces = FakeTaskStore(), FakeTraceStore()
    container.task_store.override(tasks)
    container.trace_store.override(traces)
    container.checkpoint_store.override(FakeCheckpointStore())
    container.tool_call_ledger.override(FakeToolCallLedger())
    container.tool_registry.override(ToolRegistry([collect]))
    container.llm_gateway.override(gateway)
    kernel = container.kernel()

    waiting = await kernel.execute_task(TaskRequest(task=TASK, force_mode="plan_execute"))
    assert waiting.status is TaskStatus.WAITING_APPROVAL
    calls_before = len(gateway.requests)
    done = await kernel.resolve_approval(
        waiting.pending_approval,
        ApprovalDecision(
            request_id=waiting.pending_approval, approved=True, reason="try the archive"
        ),
    )
    assert done.status is TaskStatus.SUCCEEDED, done.error
    assert done.output == "Finished with the archive."
    openings = [
        next(m.content for m in r.messages if m.kind == "user")
        for r in gateway.requests[calls_before:]
    ]
    assert not any(o.startswith("Your step (a)") for o in openings)  # a was not redone
    assert not any(o.startswith("Plan this task:") for o in openings)  # nor replanned


@pytest.mark.parametrize("where", ["planning", "writing the answer"])
async def test_a_model_error_takes_the_react_fallback(kernel_with, where) -> None:
    planning = fail("planner overloaded") if where == "planning" else say(plan_json(("a", [])))
    kernel, tasks, _, _ = kernel_with(
        conv(r"^Plan this task:", planning),
        conv(r"^Your step \(a\)", say("a done")),
        conv(r"^Write the final answer", fail("writer overloaded")),
        conv(r"^Collect the two reports", say("Answer from the fallback.")),
        model_max_retries=0,
    )
    result = await kernel.execute_task(TaskRequest(task=TASK, force_mode="plan_execute"))
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert result.output == "Answer from the fallback."
    fallback = next(e for e in tasks.events[result.task_id] if e.kind == "task.strategy_fallback")
    assert f"{where} failed" in fallback.reason and "overloaded" in fallback.reason


async def test_the_tasks_own_instructions_reach_the_planner_every_step_and_the_answer(
    kernel_with, container
) -> None:
    # An agent told to answer in Chinese (its request's system prompt) and an app's rule (a
    # capability's instructions) must hold under plan-and-execute too, whose planner, steps
    # and synthesis have system prompts of their own.
    from fakes.capabilities import FakeCapability
    from fakes.gateways import FakeRecordingGateway

    container.capabilities.override(
        [FakeCapability("reader", instructions="引用原文时必须注明段落编号。")]
    )
    kernel_with(
        conv(r"^Plan this task:", say(plan_json(("a", []), ("b", ["a"])))),
        conv(r"^Your step \(a\)", say("第一步完成")),
        conv(r"^Your step \(b\)", say("第二步完成")),
        conv(r"^Write the final answer", say("两步都完成了。")),
    )
    recording = FakeRecordingGateway(container.llm_gateway())
    container.llm_gateway.override(recording)
    container.reset_singletons()  # the kernel is built again, on the recording gateway
    kernel = container.kernel()
    result = await kernel.execute_task(
        TaskRequest(task=TASK, system_prompt="始终用中文回答。", force_mode="plan_execute")
    )
    assert result.status is TaskStatus.SUCCEEDED, result.error
    systems = [request.messages[0].content for request in recording.requests]
    # The planner, step a, step b and the synthesis.
    assert len(systems) == 4
    for system in systems:
        assert "始终用中文回答。" in system
        assert "引用原文时必须注明段落编号。" in system


async def test_the_kernels_default_prompt_is_not_repeated_in_plan_prompts(
    kernel_with, container
) -> None:
    from fakes.gateways import FakeRecordingGateway

    kernel_with(
        conv(r"^Plan this task:", say(plan_json(("a", [])))),
        conv(r"^Your step \(a\)", say("done a")),
        conv(r"^Write the final answer", say("All done.")),
    )
    recording = FakeRecordingGateway(container.llm_gateway())
    container.llm_gateway.override(recording)
    container.reset_singletons()
    result = await container.kernel().execute_task(
        TaskRequest(task=TASK, force_mode="plan_execute")
    )
    assert result.status is TaskStatus.SUCCEEDED, result.error
    assert len(recording.requests) == 3  # the planner, step a, the synthesis
    assert all(
        "Instructions for this task" not in request.messages[0].content
        for request in recording.requests
    )
