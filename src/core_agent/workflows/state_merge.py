"""A node's updates, and merging the updates of one layer into the state (``reducers``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from core_agent.contracts.errors import is_interruption
from core_agent.workflows.errors import WorkflowNodeError
from core_agent.workflows.reducers import Reducer

S = TypeVar("S", bound=BaseModel)


def node_updates(
    node: str,
    layer: int,
    given: BaseModel,
    copy: BaseModel,
    returned: Mapping[str, Any] | None,
    reducers: Mapping[str, Reducer],
) -> dict[str, Any]:
    """What ``node`` wrote: the fields it returned, and those it changed on its ``copy``.

    Raises:
        WorkflowNodeError: It returned a field the state does not have, or changed a field
            with a reducer in place (what should be added is then unknown).
    """
    fields = type(given).model_fields
    updates: dict[str, Any] = {}
    if returned is not None:
        aliases = _aliases(type(given))
        for key, value in returned.items():
            name = aliases.get(key, key)  # a field named by its alias is that field
            if name not in fields:
                raise WorkflowNodeError(
                    f"node {node!r} returned an update of {key!r}, which "
                    f"{type(given).__name__} has no field of",
                    node=node,
                    layer=layer,
                )
            updates[name] = value
    for name in fields:
        if name in updates:
            continue
        after, before = getattr(copy, name), getattr(given, name)
        if after is before or after == before:  # a NaN is not == itself, but is itself
            continue
        reducer = reducers.get(name)
        if reducer is not None:
            raise WorkflowNodeError(
                f"node {node!r} changed field {name!r} in place, but the field is merged by "
                f"the {reducer.name!r} reducer: return {{{name!r}: ...}} with what to add",
                node=node,
                layer=layer,
            )
        updates[name] = after
    return updates


def merge_layer(
    state: S,
    layer: int,
    writes: Sequence[tuple[str, Mapping[str, Any]]],
    reducers: Mapping[str, Reducer],
) -> S:
    """``state`` with the ``(node, updates)`` of one layer applied, in the order given.

    A field with a reducer combines every node's update; one without is replaced, and may be
    written by one node of the layer only.

    Raises:
        WorkflowNodeError: Two nodes wrote a field without a reducer, or the merged state is
            not a valid state (the message names the nodes that wrote the bad fields).
    """
    if not writes:
        return state
    values = dict(state)
    writers: dict[str, str] = {}
    for node, updates in writes:
        for name, value in updates.items():
            reducer = reducers.get(name)
            if reducer is None and name in writers:
                raise WorkflowNodeError(
                    f"nodes {writers[name]!r} and {node!r} of layer {layer} both wrote field "
                    f"{name!r}, which has no reducer: declare one (Annotated[..., append], "
                    "merge, add or your own Reducer) or let one node write it",
                    node=node,
                    layer=layer,
                )
            if reducer is None:
                values[name] = value
                writers[name] = node
                continue
            try:
                values[name] = reducer(values[name], value)
            except BaseException as exc:  # a reducer's SystemExit fails the node as well
                if is_interruption(exc):
                    raise
                raise WorkflowNodeError(
                    f"merging node {node!r}'s update of {name!r} with the {reducer.name!r} "
                    f"reducer failed: {type(exc).__name__}: {exc}",
                    node=node,
                    layer=layer,
                ) from exc
            writers[name] = node
    try:
        # By field name, also for a model whose fields have aliases (its input's names).
        return type(state).model_validate(values, by_name=True, by_alias=False)
    except ValidationError as exc:
        bad = sorted({str(error["loc"][0]) for error in exc.errors() if error["loc"]})
        by = ", ".join(f"{name!r} (written by {writers.get(name, '?')!r})" for name in bad)
        first = writes[0][0]
        raise WorkflowNodeError(
            f"layer {layer} left an invalid state: {by}: {exc.errors()[0]['msg']}",
            node=writers.get(bad[0], first) if bad else first,
            layer=layer,
        ) from exc


def _aliases(state_type: type[BaseModel]) -> dict[str, str]:
    """Each field's alias, to its name (a node may name a field either way)."""
    return {
        info.alias: name
        for name, info in state_type.model_fields.items()
        if info.alias is not None and info.alias != name
    }
