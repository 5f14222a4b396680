"""The workflows this process knows, by name: how a workflow task finds its graph again.

A task records its workflow's name and version, not its code (functions are not data). So a
process that resumes a workflow task, after a crash or in another process, must have built the
same workflow first: import the module that defines it before the kernel starts recovering
(``async with kernel``) or calls ``resume``. A task whose workflow is not registered here is
left for a process that has it (``DefinitionNotLoadedError``), not failed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core_agent.contracts.errors import DefinitionNotLoadedError, UsageError

if TYPE_CHECKING:
    from core_agent.workflows.graph import Workflow

_known: dict[str, Workflow[Any]] = {}


def register(workflow: Workflow[Any]) -> None:
    """Know ``workflow`` by its name from now on (``Workflow.build`` calls this).

    Raises:
        UsageError: Another workflow object of the same name and version is registered
            (two definitions would make resuming ambiguous).
    """
    known = _known.get(workflow.name)
    if known is not None and known is not workflow and known.version == workflow.version:
        raise UsageError(
            f"a different workflow named {workflow.name!r} (version {workflow.version}) is "
            "already registered in this process: give it another name, or raise its version"
        )
    _known[workflow.name] = workflow


def registered(name: str, version: int, shape: str | None = None) -> Workflow[Any]:
    """The workflow registered as ``name``, at ``version`` (and of ``shape``, when given).

    Raises:
        DefinitionNotLoadedError: None is registered here, one of another version, or one
            whose graph or state differs from the one the task was started with.
    """
    workflow = _known.get(name)
    if workflow is None:
        raise DefinitionNotLoadedError(
            f"workflow {name!r} is not registered in this process: import the module that "
            "builds it before resuming its tasks"
        )
    if workflow.version != version:
        raise DefinitionNotLoadedError(
            f"workflow {name!r} is registered here at version {workflow.version}, but the task "
            f"was started with version {version}"
        )
    if shape is not None and workflow.shape != shape:
        raise DefinitionNotLoadedError(
            f"workflow {name!r} version {version} is registered here with a different "
            "definition (its nodes, edges, routes, jumps or state fields changed) than the "
            "one the task was started with: its checkpoint would mean something else. Keep "
            "the old definition registered to finish its tasks, and give the changed one "
            "another version"
        )
    return workflow


def forget(name: str) -> None:
    """Drop the workflow registered as ``name`` (tests, hosts that reload definitions)."""
    _known.pop(name, None)
