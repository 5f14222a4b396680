"""Provider faults through litellm's real client, against the fault-injecting loopback server.

The kernel's resilience (retries, deadline, circuit breakers, fallback models) is checked from
the outside: what the server received, what the task reports, what the trace holds. A
hypothesis state machine strings faults together across tasks of one kernel.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from core_agent.container import KernelContainer
from core_agent.contracts.errors import ModelCircuitOpenError, ModelError
from core_agent.contracts.llm_gateway import LLMRequest
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.trace_store import Span
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.orchestration.circuit_breaker import BreakerSettings
from core_agent.orchestration.model_retry import RetryPolicy
from core_agent.orchestration.resilient_gateway import ResilientGateway
from fakes.clock import FakeClock
from providers.litellm_gateway import LiteLLMGateway
from shared.agent_protocol import TaskRequest, TaskResult, TaskStatus, UserMessage
from support.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio
ANSWER = "The answer is forty-two, for reasons given at length in this reply."
CUT = "The answer is forty-"
"""A text the output token limit cut off: the model is asked to go on from it."""
REQUEST = LLMRequest(messages=[UserMessage(content="q")])


def kernel_settings(server: OpenAIServer, data_dir, **overrides) -> AgentSettings:
    values = {
        "data_dir": data_dir,
        "model": "openai/primary",
        "model_fallbacks": ("openai/backup",),
        "model_api_base": server.base_url,
        "model_api_key": "sk-test",
        "model_timeout_s": 0.5,
        "model_max_retries": 2,
        "model_retry_base_s": 0.01,
        "model_retry_max_delay_s": 0.05,
        "model_retry_after_max_s": 0.1,
        "model_call_deadline_s": 4.0,
        "model_breaker_failures": 6,
        "model_breaker_reset_s": 0.2,
        "memory_recall_k": 0,
        **overrides,
    }
    return AgentSettings(**values)


def build_kernel(settings: AgentSettings) -> AgentKernel:
    container = KernelContainer()
    container.settings.override(settings)
    return container.kernel()


def models_asked(server: OpenAIServer, since: int = 0) -> list[str]:
    return [request["model"] for request in server.requests[since:]]


async def test_a_cut_stream_is_never_an_answer(openai_server, tmp_path) -> None:
    # The fault found in review: a connection-delimited stream cut mid-answer "succeeded"
    # with the cut text. Now the cut try is an error, tried again, and the task gets it all.
    openai_server.reply(ANSWER, fault="cut")
    openai_server.reply(ANSWER)
    settings = kernel_settings(openai_server, tmp_path / "data", model_fallbacks=())
    async with build_kernel(settings) as kernel:
        result = await kernel.execute_task(TaskRequest(task="q", force_mode="react"))
        spans = await kernel.task_spans(result.task_id)
    assert result.status is TaskStatus.SUCCEEDED and result.output == ANSWER
    tries = sorted(
        (s for s in spans if s.kind == "llm_attempt"), key=lambda s: s.attributes["attempt"]
    )
    assert [s.attributes["outcome"] for s in tries] == ["retry", "ok"]
    assert "ModelIncompleteError" in tries[0].error and "no finish reason" in tries[0].error


async def test_a_long_retry_after_fails_the_call_at_once_instead_of_blocking(
    openai_server, tmp_path
) -> None:
    openai_server.reply(status=429, error_message="quota", retry_after="120")
    settings = kernel_settings(
        openai_server,
        tmp_path / "data",
        model_fallbacks=(),
        model_retry_after_max_s=600,
        model_call_deadline_s=30,
    )
    async with build_kernel(settings) as kernel:
        with anyio.fail_after(20):  # a guard against a hang; the call ends at once
            result = await kernel.execute_task(TaskRequest(task="q", force_mode="react"))
    assert result.status is TaskStatus.FAILED and result.error_type == "ModelDeadlineError"
    assert "Retry-After" in result.error and len(openai_server.requests) == 1


def resilient(server: OpenAIServer, clock: FakeClock, *models: str) -> ResilientGateway:
    return ResilientGateway(
        [LiteLLMGateway(m, api_base=server.base_url, api_key="x") for m in models],
        policy=RetryPolicy(max_retries=0),
        breaker=BreakerSettings(failure_threshold=3, reset_after_s=30),
        clock=clock,
        sleep=clock.sleep,
    )


async def test_after_n_failures_the_breaker_fails_fast_then_lets_one_trial_through(
    openai_server,
) -> None:
    clock = FakeClock()
    gateway = resilient(openai_server, clock, "openai/primary")
    for _ in range(3):
        openai_server.reply(status=503, error_message="overloaded")
        with pytest.raises(ModelError):
            await gateway.complete(REQUEST)
    openai_server.reply(ANSWER)
    with pytest.raises(ModelCircuitOpenError) as caught:
        await gateway.complete(REQUEST)
    assert caught.value.model == "openai/primary" and len(openai_server.requests) == 3
    clock.advance(30)
    response = await gateway.complete(REQUEST)  # the trial
    assert response.message.content == ANSWER and len(openai_server.requests) == 4
    assert gateway.breakers[0].state == "closed"


async def test_the_fallback_model_answers_while_the_primary_is_open(openai_server) -> None:
    clock = FakeClock()
    gateway = resilient(openai_server, clock, "openai/primary", "openai/backup")
    for _ in range(3):
        openai_server.reply(status=500, error_message="down")
        openai_server.reply(ANSWER)  # taken by the backup
        await gateway.complete(REQUEST)
    assert gateway.breakers[0].state == "open"
    since = len(openai_server.requests)
    openai_server.reply(ANSWER)
    response = await gateway.complete(REQUEST)
    assert response.message.content == ANSWER
    assert models_asked(openai_server, since) == ["backup"]


# -- Faults strung together -------------------------------------------------------------------

FAULTS = st.sampled_from(
    [
        {"status": 429, "error_message": "rate limited", "retry_after": "0"},
        {"status": 429, "error_message": "rate limited", "retry_after": "1"},
        {"status": 500, "error_message": "internal"},
        {"status": 503, "error_message": "overloaded"},
        {"fault": "hang"},
        {"content": ANSWER, "fault": "reset"},
        {"content": ANSWER, "fault": "cut"},
        {"content": ANSWER, "fault": "empty"},
        {"content": ""},
        {"content": CUT, "finish_reason": "length"},
        {"content": CUT, "finish_reason": "content_filter"},
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}],
            "fault": "truncated_arguments",
        },
    ]
)


class ProviderFaults(RuleBasedStateMachine):
    """Tasks of both strategies run one after another on one kernel while the provider fails.

    Each step queues faults on the server, then runs a task (with, or without, a good answer
    after them) and checks its result, its trace and what the server received. The kernel,
    its breakers included, lives through all the steps of an example.
    """

    def __init__(self, data_dir: Path, *, chunked: bool) -> None:
        super().__init__()
        self._portal_cm = start_blocking_portal()
        self.portal: BlockingPortal = self._portal_cm.__enter__()
        self.server = OpenAIServer(chunked=chunked).__enter__()
        self.settings = kernel_settings(self.server, data_dir, plan_max_attempts=1)
        self._kernel_cm = self.portal.wrap_async_context_manager(build_kernel(self.settings))
        self.kernel = self._kernel_cm.__enter__()

    @rule(
        faults=st.lists(FAULTS, max_size=5),
        answers=st.booleans(),
        mode=st.sampled_from(["react", "plan_execute"]),
    )
    def a_task_runs(self, faults: list[dict], answers: bool, mode: str) -> None:
        self.server.replies.clear()
        for fault in faults:
            self.server.reply(**fault)
        if answers:
            # Plan-and-execute: the planner gets prose (no plan), so the ReAct fallback answers.
            for _ in range(2 if mode == "plan_execute" else 1):
                self.server.reply(ANSWER)
        since = len(self.server.requests)
        result, spans = self.portal.call(self._run, mode)
        requests = len(self.server.requests) - since

        # Every task ends: succeeded, failed, or (plan-and-execute) waiting for a human.
        ended = {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.WAITING_APPROVAL}
        assert result.status in ended, result
        # A cut, empty, filtered or truncated answer is never reported as success: an answer
        # succeeds whole, after the pieces of it the token limit cut off, if any.
        if result.status is TaskStatus.SUCCEEDED:
            assert re.fullmatch(f"(?:{re.escape(CUT)})*{re.escape(ANSWER)}", result.output or "")
        if result.status is TaskStatus.FAILED:
            assert (result.error_type or "").startswith("Model"), result.error
        llm_spans = [s for s in spans if s.kind == "llm"]
        tries = [s for s in spans if s.kind == "llm_attempt"]
        settings = self.settings
        budget = (settings.model_max_retries + 1) * (1 + len(settings.model_fallbacks))
        for span in llm_spans:
            attempts = span.attributes["attempts"]
            assert 1 <= attempts <= budget  # never beyond the retry budget
            # Never beyond the deadline (the slack covers writing the spans).
            assert span.latency_ms <= (settings.model_call_deadline_s + 1.0) * 1000
            # Every try of a call that had several is a child span.
            children = [t for t in tries if t.parent_span_id == span.span_id]
            assert len(children) == (attempts if attempts > 1 else 0)
        # Every request the provider received is in the trace.
        skipped = [t for t in tries if t.attributes["outcome"] == "skipped"]
        assert requests == sum(s.attributes["attempts"] for s in llm_spans) - len(skipped)

    async def _run(self, mode: str) -> tuple[TaskResult, list[Span]]:
        # Only a guard against a hang: each model call ends by its deadline long before.
        with anyio.fail_after(120):
            result = await self.kernel.execute_task(TaskRequest(task="q", force_mode=mode))
        return result, await self.kernel.task_spans(result.task_id)

    def teardown(self) -> None:
        try:
            self._kernel_cm.__exit__(None, None, None)
        finally:
            self.server.__exit__(None, None, None)
            self._portal_cm.__exit__(None, None, None)


@pytest.mark.parametrize("chunked", [False, True], ids=["connection-delimited", "chunked"])
def test_faults_strung_together(tmp_path, chunked) -> None:
    runs = iter(range(1_000_000))
    run_state_machine_as_test(
        lambda: ProviderFaults(tmp_path / f"run{next(runs)}", chunked=chunked),
        settings=settings(
            max_examples=6,
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
