"""Turning a model's text into a validated pydantic model.

The text may wrap the JSON in prose or a code fence, or the JSON may be broken (trailing
commas, single quotes, a missing bracket); ``json_repair`` mends what it can before the model
validates. What still fails is reported with the validation error, so the caller can ask the
model once to correct itself.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

import json_repair
from pydantic import BaseModel, ValidationError

from core_agent.contracts.errors import validation_problems
from shared.agent_protocol import ChatMessage, SystemMessage

M = TypeVar("M", bound=BaseModel)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


class OutputParseError(ValueError):
    """The text is not (or does not repair into) a valid instance."""


def extract_json_text(text: str) -> str:
    """The part of ``text`` most likely to be the JSON answer."""
    fenced = _FENCE.search(text)
    if fenced:
        return fenced.group(1).strip()
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return text.strip()
    end = max(text.rfind("}"), text.rfind("]"))
    return text[start : end + 1] if end > start else text[start:]


def parse_model_output(text: str, model: type[M]) -> M:
    """Validate ``text`` as ``model``: strict JSON first, then repaired JSON.

    Raises:
        OutputParseError: With the validation (or decoding) error, written for the model.
    """
    candidate = extract_json_text(text)
    try:
        return model.model_validate_json(candidate)
    except ValidationError as strict_error:
        error: Exception = strict_error
    repaired: Any = json_repair.repair_json(candidate, return_objects=True)
    if repaired in ("", None) or not isinstance(repaired, dict | list):
        raise OutputParseError(f"the answer contains no JSON object ({_summary(error)})")
    try:
        return model.model_validate(repaired)
    except ValidationError as exc:
        raise OutputParseError(_summary(exc)) from exc


def _summary(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return validation_problems(error)
    return str(error)


def schema_instruction(model: type[BaseModel]) -> str:
    """What to tell a model that must answer with ``model``."""
    schema = json.dumps(model.model_json_schema(), separators=(",", ":"))
    return (
        "Give your final answer by calling the `final_answer` tool, or reply with only a JSON "
        f"object (no prose) that matches this JSON Schema: {schema}"
    )


def with_schema(messages: list[ChatMessage], model: type[BaseModel]) -> None:
    """Add the answer-format instruction to the system prompt (or as one, if there is none)."""
    instruction = schema_instruction(model)
    if messages and isinstance(messages[0], SystemMessage):
        messages[0] = SystemMessage(content=f"{messages[0].content}\n\n{instruction}")
    else:
        messages.insert(0, SystemMessage(content=instruction))
