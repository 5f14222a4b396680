"""The workflows this process knows, by name and version: how a workflow task finds its graph.

A task records its workflow's name, version and shape, not its code (functions are not data).
So a process that resumes a workflow task, after a crash or in another process, must have
built the same workflow first: import the module that defines it before the kernel starts
recovering (``async with kernel``) or calls ``resume``. A task whose workflow is not
registered here is left for a process that has it (``DefinitionNotLoadedError``), not failed.

Several versions of one name are registered side by side: a changed workflow gets a new
version, and the old one stays built (registered) until its tasks have ended, each task
resuming with the version it was started with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core_agent.contracts.errors import DefinitionNotLoadedError, UsageError

if TYPE_CHECKING:
    from core_agent.workflows.graph import Workflow

_known: dict[str, dict[int, Workflow[Any]]] = {}


def register(workflow: Workflow[Any]) -> None:
    """Know ``workflow`` by its name and version from now on (``Workflow.build`` calls this).

    Registering the same object again does nothing; other versions of the name stay.

    Raises:
        UsageError: Another workflow object of the same name and version is registered
            (two definitions would make resuming ambiguous).
    """
    versions = _known.setdefault(workflow.name, {})
    known = versions.get(workflow.version)
    if known is not None and known is not workflow:
        raise UsageError(
            f"a different workflow named {workflow.name!r} (version {workflow.version}) is "
            "already registered in this process: give it another name, or another version"
        )
    versions[workflow.version] = workflow


def registered(name: str, version: int, shape: str | None = None) -> Workflow[Any]:
    """The workflow registered as ``name`` at ``version`` (and of ``shape``, when given).

    Raises:
        DefinitionNotLoadedError: None is registered here at that version (the versions
            that are, if any, are named), or one whose graph or state differs from the one
            the task was started with.
    """
    versions = _known.get(name, {})
    workflow = versions.get(version)
    if workflow is None:
        if not versions:
            raise DefinitionNotLoadedError(
                f"workflow {name!r} is not registered in this process: import the module "
                "that builds it before resuming its tasks"
            )
        others = ", ".join(str(v) for v in sorted(versions))
        raise DefinitionNotLoadedError(
            f"workflow {name!r} is registered here at version(s) {others}, but the task was "
            f"started with version {version}: build that version too (several versions of "
            "a workflow may be registered at once) to finish its tasks"
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


def forget(name: str, version: int | None = None) -> None:
    """Drop the workflow registered as ``name`` (at ``version``; every version without one).

    For tests, and hosts that reload definitions; a built workflow registers itself again
    when it is built (or run) again.
    """
    if version is None:
        _known.pop(name, None)
        return
    versions = _known.get(name, {})
    versions.pop(version, None)
    if not versions:
        _known.pop(name, None)
