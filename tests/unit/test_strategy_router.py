import dataclasses
import json
from pathlib import Path

import pytest

from core_agent.contracts.tool import Capability, ToolSpec
from core_agent.orchestration.strategy_router import AdaptiveStrategyRouter, RoutingThresholds
from core_agent.orchestration.task_classifier import TaskClassifier
from shared.agent_protocol import TaskRequest
from shared.cjk_text import has_cjk

EVAL = Path(__file__).parents[1] / "data" / "routing_eval.jsonl"


def labelled() -> list[dict]:
    return [json.loads(line) for line in EVAL.read_text().splitlines() if line.strip()]


def test_the_labelled_set_is_large_and_balanced_enough() -> None:
    rows = labelled()
    assert len(rows) >= 40
    assert {r["label"] for r in rows} == {"react", "plan_execute"}
    assert min(sum(r["label"] == k for r in rows) for k in ("react", "plan_execute")) >= 15


def test_the_held_in_set_holds_chinese_tasks_of_both_kinds() -> None:
    chinese = [r for r in labelled() if has_cjk(r["task"])]
    assert len(chinese) >= 20
    assert min(sum(r["label"] == k for r in chinese) for k in ("react", "plan_execute")) >= 10


@pytest.mark.parametrize("language", ["en", "zh"])
def test_router_accuracy_on_the_held_in_set_is_at_least_95_percent(language: str) -> None:
    router = AdaptiveStrategyRouter()
    rows = [r for r in labelled() if has_cjk(r["task"]) == (language == "zh")]
    wrong = [
        r["task"]
        for r in rows
        if router.decide(TaskRequest(task=r["task"]), []).strategy != r["label"]
    ]
    assert 1 - len(wrong) / len(rows) >= 0.95, wrong


def test_chinese_sequencing_and_dependencies_are_recognised() -> None:
    router = AdaptiveStrategyRouter()
    chained = router.decide(TaskRequest(task="先查一下金价，然后把它换算成日元。"), [])
    assert chained.strategy == "plan_execute"
    assert chained.features["sub_goals"] == 2 and chained.features["dependencies"] >= 2
    joined = router.decide(TaskRequest(task="下载报表并计算总数，再把结果发给我。"), [])
    assert joined.features["sub_goals"] == 3
    listed = router.decide(TaskRequest(task="一、下载文件；二、解压；三、统计文件数。"), [])
    assert listed.strategy == "plan_execute" and listed.features["list_items"] == 3


@pytest.mark.parametrize(
    "task",
    [
        "先秦时期的诸子百家有哪些代表人物？",  # 先 inside a word, not "first"
        "这本书的最后一章讲了什么？",  # 最后 as "the last", not "finally"
        "审阅这个合并请求。",  # 并 inside 合并 (merge) is no connective
        "请再解释一遍什么是向量数据库。",  # 再 as "again"
        "打开 notes.md，告诉我最后一条写了什么。",  # two steps, nothing passed along
    ],
)
def test_chinese_words_that_only_look_like_sequencing_do_not_make_a_plan(task: str) -> None:
    decision = AdaptiveStrategyRouter().decide(TaskRequest(task=task), [])
    assert decision.strategy == "react", decision.features


def test_chinese_context_is_counted_per_character_not_per_four() -> None:
    features = TaskClassifier().classify("请总结这一章的内容。" * 10)
    assert features.context_tokens >= 80  # 90 Han characters are about 90-130 model tokens


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


def test_a_decision_reports_every_feature_the_router_decides_on() -> None:
    task = "Read a.txt, then summarise it"
    features = TaskClassifier().classify(task, [])
    reported = AdaptiveStrategyRouter().decide(TaskRequest(task=task), [])
    assert set(reported.features) == {f.name for f in dataclasses.fields(features)}
    assert reported.features["risk"] == features.risk.value
    assert reported.features["sub_goals"] == features.sub_goals
    json.dumps(reported.features)  # JSON-ready, as the trace stores it


HELD_OUT = Path(__file__).parents[1] / "data" / "routing_heldout.jsonl"


def test_the_held_out_set_in_both_languages() -> None:
    # Written before the Chinese rules were tuned and never tuned on. 90% overall is the
    # router's long-standing target; each language must reach 85% so that losing one
    # language's rules (Chinese fell to 13 of 23 without them) fails here. Measured when
    # written: 42 of 43 (English 20/20, Chinese 22/23).
    rows = [json.loads(line) for line in HELD_OUT.read_text().splitlines() if line.strip()]
    assert len(rows) >= 40
    router = AdaptiveStrategyRouter()
    right = {"en": [0, 0], "zh": [0, 0]}
    for row in rows:
        tally = right["zh" if has_cjk(row["task"]) else "en"]
        tally[0] += router.decide(TaskRequest(task=row["task"]), []).strategy == row["label"]
        tally[1] += 1
    assert min(tally[1] for tally in right.values()) >= 20
    assert sum(t[0] for t in right.values()) / len(rows) >= 0.9, right
    assert all(hits / n >= 0.85 for hits, n in right.values()), right
