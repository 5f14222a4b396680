"""How the updates of nodes that ran side by side are merged into one state (seed 001 §2.1.2).

A state field declares its reducer with ``Annotated``::

    class Research(BaseModel):
        notes: Annotated[list[str], append] = []
        summary: str = ""

A node's update of a field with a reducer is combined with the field's value
(``reducer(current, update)``), so two parallel nodes may both add notes. A field without a
reducer is replaced by the update, and two nodes of one layer writing it is an error: which one
should win is not something to leave to timing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True, slots=True)
class Reducer:
    """Combines a field's current value with one node's update of it."""

    combine: Callable[[Any, Any], Any]
    name: str

    def __call__(self, current: Any, update: Any) -> Any:
        """The field's new value."""
        return self.combine(current, update)


def _append(current: Sequence[Any], update: Any) -> list[Any]:
    if isinstance(update, (str, bytes, bytearray)) or not isinstance(
        update, (Sequence, AbstractSet)
    ):
        return [*current, update]  # one item: a str is not split into characters
    return [*current, *update]


def _merge(current: Mapping[Any, Any], update: Mapping[Any, Any]) -> dict[Any, Any]:
    return {**current, **update}


def _add(current: Any, update: Any) -> Any:
    return current + update


append = Reducer(_append, "append")
"""A list field: an update that is a list, tuple or set adds its items at the end; any other
value (a ``str``, ``bytes``, a dict, a model, a number) is added as one item."""
merge = Reducer(_merge, "merge")
"""A dict field: each update's keys are set (a later node's win for one key)."""
add = Reducer(_add, "add")
"""A number field (a counter): each update is added."""


def field_reducers(state_type: type[BaseModel]) -> dict[str, Reducer]:
    """The reducer each field of ``state_type`` declares in its ``Annotated`` metadata."""
    found: dict[str, Reducer] = {}
    for name, info in state_type.model_fields.items():
        for meta in info.metadata:
            if isinstance(meta, Reducer):
                found[name] = meta
    return found
