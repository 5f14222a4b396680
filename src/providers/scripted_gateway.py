"""A deterministic model for demos and tests: it answers from a script, tool calls included.

Like httpx's ``MockTransport``, this is a real adapter of the port, shipped with the product.
It is stateless: the reply to a request is chosen by how many assistant turns the request
already holds, so turn 1 of every task gets script entry 1, and concurrent tasks do not
interfere. A strategy that holds several conversations per task (a planner, plan steps, a
final synthesis) is scripted with *conversations*: each has a regular expression matched
against the conversation's first user message, and its own list of turns. The turns of a
session (each task starts from the session's history) are scripted with conversations
matched ``on`` the last user message, the newest turn's.

Without a script it follows a small demo policy: arithmetic in the task goes to the
``calculator`` tool, a question about the time goes to ``current_time``, and the tool's result
is reported back. It does not understand language; it says so when it cannot help.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core_agent.contracts.errors import ConfigurationError, ModelError
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
    LLMTextDelta,
)
from core_agent.contracts.settings import AgentSettings
from shared.agent_protocol import (
    AssistantMessage,
    ChatMessage,
    TokenUsage,
    ToolCall,
    ToolMessage,
    UserMessage,
)


class ScriptedToolCall(BaseModel):
    """A tool call the script makes; ``raw_arguments`` simulates a model sending broken JSON."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, object] | None = None
    raw_arguments: str | None = None
    id: str | None = None


class ScriptedError(BaseModel):
    """A model failure the script simulates."""

    model_config = ConfigDict(extra="forbid")

    message: str
    status_code: int | None = 500


class ScriptedTurn(BaseModel):
    """One model turn: text, tool calls, or an error."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    error: ScriptedError | None = None
    usage: TokenUsage | None = None
    """The tokens and cost this turn reports; estimated from the text (at no cost) when unset."""


class ScriptedConversation(BaseModel):
    """Turns for the conversations whose first user message matches ``match`` (a regex)."""

    model_config = ConfigDict(extra="forbid")

    match: str = ""
    turns: list[ScriptedTurn]
    on: Literal["first", "last"] = "first"
    """The user message ``match`` is tried on: the request's first (a task's own message, or
    in a session the session's first), or its last, for scripting each turn of a session:
    the turns are then counted from that message on."""


class ScriptFile(BaseModel):
    """A script file: plain turns (a JSON list) or ``{"conversations": [...]}``."""

    model_config = ConfigDict(extra="forbid")

    conversations: list[ScriptedConversation]


Policy = Callable[[Sequence[ChatMessage]], ScriptedTurn]

_ARITHMETIC = re.compile(r"[-+(]*\d[\d.\s]*(?:[-+*/%^()]+\s*[-+(]*\s*\d[\d.\s]*\)*\s*)+")
_TIME_WORDS = re.compile(r"\b(time|date|today|clock|day is it)\b", re.IGNORECASE)

DEMO_NOTICE = (
    "I am core-agent's scripted demo model: I follow fixed rules, not language understanding. "
    "I can work out arithmetic (with the calculator tool) and tell the time (with the "
    "current_time tool). Set AGENT_MODEL to a litellm model string to use a real model."
)


def demo_policy(messages: Sequence[ChatMessage]) -> ScriptedTurn:
    """The built-in rules used when no script is given."""
    last = messages[-1] if messages else None
    if isinstance(last, ToolMessage):
        if last.is_error:
            return ScriptedTurn(content=f"The {last.name} tool reported an error: {last.content}")
        return ScriptedTurn(content=_describe_result(messages, last))
    task = next((m.content for m in reversed(messages) if isinstance(m, UserMessage)), "")
    match = _ARITHMETIC.search(task)
    if match:
        expression = match.group(0).strip().rstrip("=?").strip().replace("^", "**")
        return ScriptedTurn(
            tool_calls=[ScriptedToolCall(name="calculator", arguments={"expression": expression})]
        )
    if _TIME_WORDS.search(task):
        return ScriptedTurn(tool_calls=[ScriptedToolCall(name="current_time", arguments={})])
    return ScriptedTurn(content=DEMO_NOTICE)


def _describe_result(messages: Sequence[ChatMessage], result: ToolMessage) -> str:
    call = next(
        (
            c
            for m in reversed(messages)
            if isinstance(m, AssistantMessage)
            for c in m.tool_calls
            if c.id == result.tool_call_id
        ),
        None,
    )
    if result.name == "calculator" and call and call.arguments:
        return f"{call.arguments.get('expression')} = {result.content}"
    if result.name == "current_time":
        return f"The current time is {result.content}."
    return f"The {result.name} tool returned: {result.content}"


def _demo_summary(request: LLMRequest) -> str:
    """Not a summary: the newest lines of the request, within its ``max_tokens``."""
    text = request.messages[-1].content if request.messages else ""
    budget = (request.max_tokens or 256) * 4
    lines = [line for line in (text or "").splitlines() if line.strip()]
    kept: list[str] = []
    for line in reversed(lines):
        if sum(len(k) + 1 for k in kept) + len(line) > budget:
            break
        kept.insert(0, line)
    return "\n".join(kept) or "(nothing to summarize)"


def _message_text(message: ChatMessage) -> str:
    if isinstance(message, AssistantMessage):
        calls = "".join(f"{c.name}{c.raw_arguments or c.arguments}" for c in message.tool_calls)
        return (message.content or "") + calls
    return message.content


def _estimate_tokens(text: str) -> int:
    # About four characters per token for English; an estimate, labelled as such in docs.
    return max(1, math.ceil(len(text) / 4)) if text else 0


class ScriptedLLMGateway(ILLMGateway):
    """Answers from a list of turns (turn *n* of each task gets entry *n*) or a policy."""

    def __init__(
        self,
        script: Sequence[ScriptedTurn] | None = None,
        *,
        conversations: Sequence[ScriptedConversation] | None = None,
        policy: Policy | None = None,
        model_name: str = "scripted/demo",
    ) -> None:
        given = [x for x in (script, conversations, policy) if x is not None]
        if len(given) > 1:
            raise ConfigurationError(
                "give the scripted model one of a script, conversations or a policy"
            )
        if script is not None:
            conversations = [ScriptedConversation(turns=list(script))]
        self._conversations = list(conversations) if conversations is not None else None
        self._patterns = [re.compile(c.match, re.DOTALL) for c in self._conversations or ()]
        self._policy = policy or demo_policy
        self._model_name = model_name

    @classmethod
    def from_settings(cls, settings: AgentSettings) -> ScriptedLLMGateway:
        """The script in ``AGENT_SCRIPTED_MODEL_SCRIPT`` (a JSON list of turns), or the demo."""
        if settings.scripted_model_script is None:
            return cls()
        return cls.from_file(settings.scripted_model_script)

    @classmethod
    def from_file(cls, path: Path) -> ScriptedLLMGateway:
        """Load a JSON script: a list of ``{"content": ..., "tool_calls": [...], "error": ...}``."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            if isinstance(data, list):
                conversations = [ScriptedConversation.model_validate({"turns": data})]
            else:
                conversations = ScriptFile.model_validate(data).conversations
            for conversation in conversations:
                re.compile(conversation.match)
        except (OSError, ValueError, TypeError, ValidationError, re.error) as exc:
            raise ConfigurationError(f"cannot load scripted model script {path}: {exc}") from exc
        return cls(conversations=conversations, model_name=f"scripted/{Path(path).stem}")

    @property
    def model_name(self) -> str:
        """``scripted/<name>``."""
        return self._model_name

    def _turn_for(self, messages: Sequence[ChatMessage]) -> ScriptedTurn:
        if self._conversations is None:
            return self._policy(messages)
        users = [(i, m.content) for i, m in enumerate(messages) if isinstance(m, UserMessage)]
        first = users[0][1] if users else ""
        last = users[-1][1] if users else ""
        conversation = next(
            (
                candidate
                for candidate, pattern in zip(self._conversations, self._patterns, strict=True)
                if pattern.search(last if candidate.on == "last" else first)
            ),
            None,
        )
        if conversation is None:
            raise ModelError(
                f"no scripted conversation matches {first[:200]!r}"
                + (f" (first user message) or {last[:200]!r} (last)" if last != first else "")
            )
        since = users[-1][0] if conversation.on == "last" and users else 0
        index = sum(isinstance(m, AssistantMessage) for m in messages[since:])
        if index >= len(conversation.turns):
            raise ModelError(
                f"scripted model has no turn {index + 1} in the conversation matching "
                f"{conversation.match!r} (it has {len(conversation.turns)})"
            )
        return conversation.turns[index]

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The scripted reply to ``request``.

        The demo policy answers a session's summary request (``metadata["purpose"]`` is
        ``session.compaction``) with the newest lines it was given, cut to the length asked.
        """
        if (
            self._conversations is None
            and self._policy is demo_policy
            and request.metadata.get("purpose") == "session.compaction"
        ):
            turn = ScriptedTurn(content=_demo_summary(request))
        else:
            turn = self._turn_for(request.messages)
        if turn.error is not None:
            raise ModelError(
                turn.error.message,
                status_code=turn.error.status_code,
                body=turn.error.message,
                retryable=(turn.error.status_code or 0) >= 500,
            )
        index = sum(isinstance(m, AssistantMessage) for m in request.messages)
        calls = tuple(
            ToolCall(
                id=call.id or f"call_{index + 1}_{n + 1}",
                name=call.name,
                arguments=call.arguments if call.raw_arguments is None else None,
                raw_arguments=call.raw_arguments
                if call.raw_arguments is not None
                else json.dumps(call.arguments or {}),
            )
            for n, call in enumerate(turn.tool_calls)
        )
        message = AssistantMessage(content=turn.content, tool_calls=calls)
        prompt = "".join(_message_text(m) for m in request.messages)
        completion = (turn.content or "") + "".join(c.raw_arguments or "" for c in calls)
        return LLMResponse(
            message=message,
            usage=turn.usage
            or TokenUsage(
                input_tokens=_estimate_tokens(prompt),
                output_tokens=_estimate_tokens(completion),
                cost_usd=0.0,
            ),
            model=self._model_name,
            finish_reason="tool_calls" if calls else "stop",
        )

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """The same reply, its text in word-sized deltas first."""
        response = await self.complete(request)
        for piece in re.findall(r"\S+\s*|\s+", response.message.content or ""):
            yield LLMTextDelta(piece)
        yield response
