"""What goes wrong with a workflow: a bad graph when it is built, a node failing when it runs."""

from __future__ import annotations

from core_agent.contracts.errors import RunError, UsageError


class WorkflowDefinitionError(UsageError):
    """The graph is not a workflow that can run (unknown or unreachable node, endless cycle).

    Raised when the workflow is built, before any task exists; the message names the nodes.
    """


class WorkflowWarning(UserWarning):
    """A graph that runs, but maybe not as its author meant (an unconditional fan-out)."""


class WorkflowNodeError(RunError):
    """A node failed, or its result cannot be merged: the workflow task fails with this.

    The state stays as the last completed layer left it (its checkpoint), from which the
    workflow can be run again (``rerun_workflow``).
    """

    def __init__(self, message: str, *, node: str, layer: int) -> None:
        super().__init__(message)
        self.node = node
        self.layer = layer
