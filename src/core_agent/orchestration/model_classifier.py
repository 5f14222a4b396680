"""An optional second opinion on a task's structure from a (cheap) model.

The deterministic ``TaskClassifier`` reads surface cues; a model understands wording it has
never seen. With ``AGENT_ROUTER_CLASSIFIER=model`` the router asks the model how many
sub-goals the task has and whether they depend on each other, and uses that instead of the
counted values. Any failure (the model errs, answers nonsense) keeps the deterministic
features, and the features say so.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from core_agent.contracts.errors import CoreAgentError, RunStoppedError
from core_agent.contracts.llm_gateway import ILLMGateway, LLMRequest
from core_agent.contracts.tool import ToolSpec
from core_agent.orchestration.structured_output import OutputParseError, parse_model_output
from core_agent.orchestration.task_classifier import TaskClassifier, TaskFeatures
from core_agent.prompts import PromptSet, default_prompts
from shared.agent_protocol import SystemMessage, UserMessage


class _Verdict(BaseModel):
    sub_goals: int = Field(ge=1, le=50)
    dependent: bool


class ModelAssistedClassifier:
    """Deterministic features, with sub-goals and dependency taken from a model's verdict.

    The model is asked with the ``classifier`` prompt of ``prompts`` (the shipped set when
    ``None``), which must make it answer ``{"sub_goals": <int>, "dependent": <bool>}``.
    """

    def __init__(
        self,
        llm: ILLMGateway,
        base: TaskClassifier | None = None,
        prompts: PromptSet | None = None,
    ) -> None:
        self._llm = llm
        self._prompt = (prompts if prompts is not None else default_prompts()).render("classifier")
        self._base = base or TaskClassifier()

    def classify(self, task: str, tools: Sequence[ToolSpec] = ()) -> TaskFeatures:
        """The deterministic features (for callers that cannot await)."""
        return self._base.classify(task, tools)

    async def classify_with_model(
        self, task: str, tools: Sequence[ToolSpec] = ()
    ) -> tuple[TaskFeatures, dict[str, object]]:
        """Features adjusted by the model's verdict, and a note on how they were obtained."""
        features = self._base.classify(task, tools)
        try:
            response = await self._llm.complete(
                LLMRequest(
                    messages=(
                        SystemMessage(content=self._prompt),
                        UserMessage(content=task),
                    ),
                    temperature=0.0,
                    max_tokens=50,
                )
            )
            verdict = parse_model_output(response.message.content or "", _Verdict)
        except RunStoppedError:
            raise  # the run must end (a replay that parted from its recording): no way round
        except (CoreAgentError, OutputParseError) as exc:
            # Whole: stored with the route, redacted there; a cut here could split a key the
            # provider's error quoted.
            return features, {"classifier": "deterministic", "model_error": str(exc)}
        adjusted = TaskFeatures(
            sub_goals=verdict.sub_goals,
            dependencies=max(features.dependencies, 1) if verdict.dependent else 0,
            list_items=features.list_items,
            context_tokens=features.context_tokens,
            tools_available=features.tools_available,
            likely_tools=features.likely_tools,
            risk=features.risk,
            clauses=features.clauses,
        )
        note: dict[str, object] = {
            "classifier": "model",
            "deterministic_sub_goals": features.sub_goals,
            "deterministic_dependencies": features.dependencies,
            "classifier_tokens": response.paid_usage.input_tokens
            + response.paid_usage.output_tokens,
        }
        return adjusted, note
