"""The response model a task answers with, kept across suspensions and restarts.

A task started with ``response_model`` records the model's JSON Schema and its name
(``module:qualname``) with the task. A run that carries it on (after a human's decision, or
in another process after a crash) needs the class itself, to offer the ``final_answer`` tool
and validate the answer. It is, in this order:

1. the class the host passes again (``resolve_approval(..., response_model=...)``,
   ``resume(..., response_model=...)``): refused if its schema differs from the recorded one;
2. the class this kernel already ran the task with (a host approver's decision, or a
   ``resolve_approval`` in the process that started the task);
3. a class of the recorded name in a module this process has already imported, if its schema
   is the recorded one.

The name is never imported: the database is data, and importing a module named by it would
run code chosen by whoever can write the file. A host whose models live in a module it has
not imported passes the class again.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel

from core_agent.contracts.errors import ResponseModelError
from shared.agent_protocol import TaskState


def model_name(model: type[BaseModel]) -> str:
    """``module:qualname`` of ``model``, as recorded with a task."""
    return f"{model.__module__}:{model.__qualname__}"


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema as it reads back from storage (JSON types only)."""
    schema: dict[str, Any] = json.loads(json.dumps(model.model_json_schema()))
    return schema


def loaded_model(name: str) -> type[BaseModel] | None:
    """The pydantic model called ``name`` in an already imported module, or ``None``.

    Only namespaces are read (no import, no module ``__getattr__``): a class defined inside
    a function, or in a module not imported here, is not found.
    """
    module_name, _, qualname = name.partition(":")
    found: object = sys.modules.get(module_name)
    if found is None or not qualname:
        return None
    for part in qualname.split("."):
        try:
            found = vars(found).get(part)
        except TypeError:  # an object without a namespace
            return None
        if found is None:
            return None
    if isinstance(found, type) and issubclass(found, BaseModel):
        return found
    return None


def response_model_for(
    state: TaskState,
    *,
    given: type[BaseModel] | None,
    known: type[BaseModel] | None,
) -> type[BaseModel] | None:
    """The model a resumed run of ``state`` answers with (see the module); ``None`` if none.

    ``given`` is what the host passed; ``known`` the class this kernel ran the task with.

    Raises:
        ResponseModelError: ``given`` does not fit the task (another schema, or the task has
            none), or the task has a response model and none of the three is found.
    """
    expected = state.response_model
    if state.response_schema is None:
        if given is not None:
            raise ResponseModelError(
                state.task_id,
                None,
                f"task {state.task_id} was started without a response_model; it answers with text",
            )
        return None
    if given is not None:
        if model_schema(given) != state.response_schema:
            raise ResponseModelError(
                state.task_id,
                expected,
                f"task {state.task_id} was started with response_model {expected}, whose "
                f"JSON Schema differs from that of {model_name(given)}",
            )
        return given
    for candidate in (known, loaded_model(expected or "")):
        if candidate is not None and model_schema(candidate) == state.response_schema:
            return candidate
    raise ResponseModelError(
        state.task_id,
        expected,
        f"task {state.task_id} was started with response_model {expected} and must answer "
        "in that form: pass the class again (response_model=...), or import the module that "
        "defines it first",
    )
