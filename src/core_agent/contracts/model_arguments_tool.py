"""A base for tools whose arguments are a pydantic model.

Not a port: a convenience over ``ITool`` for the adapters that implement tools (providers'
built-in tools, business capabilities), which may import ``core_agent.contracts`` only.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from core_agent.contracts.errors import ToolArgumentsError
from core_agent.contracts.tool import Capability, ITool, ToolContext, ToolSpec

A = TypeVar("A", bound=BaseModel)


class ModelArgumentsTool(ITool, Generic[A], abc.ABC):
    """A tool described by class attributes, validated by ``arguments_model``."""

    name: ClassVar[str]
    description: ClassVar[str]
    arguments_model: ClassVar[type[BaseModel]]
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    idempotent: ClassVar[bool] = False

    def __init__(self) -> None:
        parameters = self.arguments_model.model_json_schema()
        parameters.pop("title", None)
        self._spec = ToolSpec(
            name=self.name,
            description=self.description,
            parameters=parameters,
            capabilities=self.capabilities,
            idempotent=self.idempotent,
        )

    @property
    def spec(self) -> ToolSpec:
        """Built once from the class attributes."""
        return self._spec

    def validate_arguments(self, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        """Validate with the model; the instance travels under the key ``"args"``."""
        try:
            return {"args": self.arguments_model.model_validate(dict(arguments))}
        except ValidationError as exc:
            raise ToolArgumentsError.from_validation_error(self.name, exc) from exc

    async def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        """Run ``execute`` on the validated model."""
        args: A = arguments["args"]
        return await self.execute(args, context)

    @abc.abstractmethod
    async def execute(self, args: A, context: ToolContext) -> str:
        """Do the tool's work on validated arguments."""
