"""A workflow's state as JSON data and back: what its request and checkpoints hold.

Every place that stores a state or reads one back goes through here, so a state survives the
round trip the way the model defines it:

- by alias, where the model gives its fields aliases (a model validates by alias; data is
  read back by alias or by field name, so checkpoints written by field name still load);
- NaN and the infinities kept, in typed fields and in ``Any`` ones alike (``WorkflowCheckpoint``
  writes them as the JSON constants ``NaN`` and ``Infinity``, and the request carries the
  initial state as JSON text);
- a state that cannot be JSON text (bytes that are not UTF-8, a string holding a lone
  surrogate such as ``os.fsdecode`` makes of a file name that is not UTF-8, an object
  pydantic cannot serialize) raises ``StateDataError`` naming its fields, checked where the
  data is made (not later, when a checkpoint is written), which the callers turn into a
  ``UsageError`` (the initial state) or a failed layer (a node's update), never a raw
  library exception. The same holds for the data a ``Next`` hands to its target.
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import (
    PydanticSerializationError,
    SchemaSerializer,
    from_json,
    to_json,
    to_jsonable_python,
)

S = TypeVar("S", bound=BaseModel)


class StateDataError(ValueError):
    """A value cannot be JSON data (so it cannot be checkpointed); ``fields`` says where."""

    def __init__(self, message: str, fields: set[str]) -> None:
        super().__init__(message)
        self.fields = fields


def state_data(state: BaseModel) -> dict[str, Any]:
    """``state`` as JSON data, by alias, NaN and infinities kept as floats (also in ``Any``).

    Raises:
        StateDataError: A field's value cannot be JSON text (the message names the fields).
    """
    serializer = _serializer(type(state))
    try:
        data: dict[str, Any] = serializer.to_python(
            state, mode="json", by_alias=True, round_trip=True
        )
        _check_text(data)
    except (PydanticSerializationError, ValueError) as exc:
        bad = _bad_fields(state)
        raise StateDataError(
            f"field(s) {', '.join(map(repr, bad)) or '?'} of {type(state).__name__} cannot be "
            f"JSON data, which a checkpoint holds: {type(exc).__name__}: {exc}",
            set(bad),
        ) from exc
    return data


@cache
def _serializer(state_type: type[BaseModel]) -> SchemaSerializer:
    """The model's serializer, keeping NaN and infinities where its type is not declared.

    A model's own ``model_dump(mode="json")`` turns a NaN in an ``Any`` field into ``None``
    (its ``ser_json_inf_nan``), though it keeps one in a ``float`` field.
    """
    return SchemaSerializer(state_type.__pydantic_core_schema__, {"ser_json_inf_nan": "constants"})


def _check_text(data: Any) -> None:
    """Raise unless ``data`` can be written as JSON text (UTF-8: no lone surrogate)."""
    to_json(data, inf_nan_mode="constants")


def load_state(state_type: type[S], data: Any) -> S:
    """The state ``data`` holds (by alias or by field name).

    Raises:
        pydantic.ValidationError: It is not a valid ``state_type``.
    """
    return state_type.model_validate(data, by_alias=True, by_name=True)


def json_data(value: Any, what: str) -> Any:
    """``value`` as JSON data (tuples and sets become lists, models dicts), NaN kept.

    Raises:
        StateDataError: It cannot be JSON data (``what`` says what it is, in the message).
    """
    try:
        data = to_jsonable_python(value, inf_nan_mode="constants")
        _check_text(data)
    except (PydanticSerializationError, ValueError) as exc:
        raise StateDataError(
            f"{what} cannot be JSON data, which a checkpoint holds: {type(exc).__name__}: {exc}",
            set(),
        ) from exc
    return data


def host_data(data: dict[str, Any]) -> dict[str, Any]:
    """State data as plain JSON for hosts (a task's structured output), NaN as ``None``.

    JSON has no NaN or infinities: a host's ``json.dumps(allow_nan=False)`` takes this.

    The workflow's own state (``WorkflowResult.state``, its checkpoints) keeps them.
    """
    plain: dict[str, Any] = to_jsonable_python(data, inf_nan_mode="null")
    return plain


def state_text(data: dict[str, Any]) -> str:
    """JSON text of state data, NaN and infinities written as JSON constants."""
    return to_json(data, inf_nan_mode="constants").decode()


def text_state(text: str) -> Any:
    """The state data ``state_text`` wrote."""
    return from_json(text, allow_inf_nan=True)


def survives_round_trip(state: BaseModel) -> list[str]:
    """The fields of ``state`` that would not come back the same from their JSON data.

    The same: equal, or with the same JSON form (a tuple read back as a list, a NaN). A
    field the model leaves out of its dumps (``exclude=True``) comes back as its default,
    and is named unless that is its value.

    Raises:
        StateDataError: As ``state_data``.
    """
    again = load_state(type(state), text_state(state_text(state_data(state))))
    changed = []
    for name in type(state).model_fields:
        before, after = getattr(state, name), getattr(again, name)
        if before is after or before == after:
            continue
        try:
            same = to_json(before, inf_nan_mode="constants") == to_json(
                after, inf_nan_mode="constants"
            )
        except (PydanticSerializationError, ValueError):
            same = False
        if not same:
            changed.append(name)
    return changed


def _bad_fields(state: BaseModel) -> list[str]:
    serializer = _serializer(type(state))
    bad = []
    for name in type(state).model_fields:
        try:
            _check_text(serializer.to_python(state, mode="json", include={name}, round_trip=True))
        except (PydanticSerializationError, ValueError):
            bad.append(name)
    return bad
