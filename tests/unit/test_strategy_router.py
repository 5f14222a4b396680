import json
from pathlib import Path

import pytest

from core_agent.contracts.tool import Capability, ToolSpec
from core_agent.orchestration.strategy_router import AdaptiveStrategyRouter, RoutingThresholds
from core_agent.orchestration.task_classifier import TaskClassifier
from shared.agent_protocol import TaskRequest

EVAL = Path(__file__).parents[1] / "data" / "routing_eval.jsonl"


def labelled() -> list[dict]:
    return [json.loads(line) for line in EVAL.read_text().splitlines() if line.strip()]


def test_the_labelled_set_is_large_and_balanced_enough() -> None:
    rows = labelled()
    assert len(rows) >= 40
    assert {r["label"] for r in rows} == {"react", "plan_execute"}
    assert min(sum(r["label"] == k for r in rows) for k in ("react", "plan_execute")) >= 15


def test_router_accuracy_on_the_held_in_set_is_at_least_90_percent() -> None:
    router = AdaptiveStrategyRouter()
    rows = labelled()
    wrong = [
        r["task"]
        for r in rows
        if router.decide(TaskRequest(task=r["task"]), []).strategy != r["label"]
    ]
    assert 1 - len(wrong) / len(rows) >= 0.9, wrong


@pytest.mark.parametrize("forced", ["react", "plan_execute"])
def test_a_forced_mode_wins_and_still_reports_features(forced: str) -> None:
    multi = "Fetch the data, clean it, then chart it and email the chart."
    request_forced = AdaptiveStrategyRouter().decide(TaskRequest(task=multi, force_mode=forced), [])
    assert request_forced.strategy == forced and request_forced.forced
    assert "force_mode" in request_forced.reason
    assert request_forced.features["sub_goals"] >= 3
    config_forced = AdaptiveStrategyRouter(mode=forced).decide(TaskRequest(task="hi"), [])
    assert config_forced.strategy == forced and "AGENT_STRATEGY_MODE" in config_forced.reason


def test_features_and_reasons_explain_the_decision() -> None:
    router = AdaptiveStrategyRouter()
    listed = router.decide(TaskRequest(task="1. download it\n2. unzip it\n3. count files"), [])
    assert listed.strategy == "plan_execute" and listed.features["list_items"] == 3
    assert "lists 3 steps" in listed.reason
    chained = router.decide(TaskRequest(task="Get the price of gold, then convert it to yen."), [])
    assert chained.strategy == "plan_execute"
    assert chained.features["sub_goals"] == 2 and chained.features["dependencies"] >= 1
    simple = router.decide(TaskRequest(task="Open the file and show me the first line."), [])
    assert simple.strategy == "react" and "independent" in simple.reason


def test_thresholds_are_configurable() -> None:
    strict = AdaptiveStrategyRouter(
        thresholds=RoutingThresholds(min_sub_goals=5, min_dependent_sub_goals=5)
    )
    task = "Read the log, find the errors, and count them."
    assert AdaptiveStrategyRouter().decide(TaskRequest(task=task), []).strategy == "plan_execute"
    assert strict.decide(TaskRequest(task=task), []).strategy == "react"


def test_likely_tools_and_their_risk_come_from_the_tool_specs() -> None:
    tools = [
        ToolSpec(
            "run_command",
            "Run a shell command in the workspace.",
            {"type": "object"},
            capabilities=frozenset({Capability.EXEC}),
        ),
        ToolSpec(
            "read_file",
            "Read a text file from the workspace.",
            {"type": "object"},
            capabilities=frozenset({Capability.READ}),
        ),
        ToolSpec("calculator", "Evaluate arithmetic.", {"type": "object"}),
    ]
    features = TaskClassifier().classify("Run the test command and read the failing file.", tools)
    assert set(features.likely_tools) == {"run_command", "read_file"}
    assert features.risk.value == "high"
    assert features.tools_available == 3
    calm = TaskClassifier().classify("Read the README file.", tools)
    assert calm.likely_tools == ("read_file",) and calm.risk.value == "low"


@pytest.mark.anyio
async def test_the_optional_model_classifier_can_overrule_the_counted_features() -> None:
    from core_agent.orchestration.model_classifier import ModelAssistedClassifier
    from providers.scripted_gateway import ScriptedLLMGateway, ScriptedTurn

    task = "Sort out the quarterly numbers for the board."
    deterministic = AdaptiveStrategyRouter()
    assert (await deterministic.route(TaskRequest(task=task), [])).strategy == "react"

    verdict = ScriptedLLMGateway([ScriptedTurn(content='{"sub_goals": 4, "dependent": true}')])
    assisted = AdaptiveStrategyRouter(model_classifier=ModelAssistedClassifier(verdict))
    decision = await assisted.route(TaskRequest(task=task), [])
    assert decision.strategy == "plan_execute"
    assert decision.features["classifier"] == "model"
    assert decision.features["sub_goals"] == 4
    assert decision.features["deterministic_sub_goals"] == 1


@pytest.mark.anyio
async def test_a_failing_model_classifier_falls_back_to_the_deterministic_features() -> None:
    from core_agent.orchestration.model_classifier import ModelAssistedClassifier
    from providers.scripted_gateway import ScriptedError, ScriptedLLMGateway, ScriptedTurn

    for turn in (
        ScriptedTurn(error=ScriptedError(message="overloaded", status_code=529)),
        ScriptedTurn(content="It has several parts, I think."),
    ):
        router = AdaptiveStrategyRouter(
            model_classifier=ModelAssistedClassifier(ScriptedLLMGateway([turn]))
        )
        decision = await router.route(TaskRequest(task="What is the capital of Peru?"), [])
        assert decision.strategy == "react"
        assert decision.features["classifier"] == "deterministic"
        assert decision.features["model_error"]
