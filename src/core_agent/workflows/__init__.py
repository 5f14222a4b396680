"""Workflows: graphs of nodes (functions, agents, workflows) over a typed state, run as tasks.

See ``graph`` for building one, ``workflow_executor`` for how it runs (layers, merging,
jumps, checkpoints, failure), ``workflow_runs`` for running, resuming and rerunning it.
"""

from core_agent.workflows.errors import WorkflowDefinitionError, WorkflowNodeError, WorkflowWarning
from core_agent.workflows.graph import Next, Workflow
from core_agent.workflows.reducers import Reducer, add, append, merge
from core_agent.workflows.workflow_runs import (
    WorkflowResult,
    WorkflowSnapshot,
    rerun_workflow,
    resume_workflow,
    run_workflow,
    workflow_request,
    workflow_snapshot,
)

__all__ = [
    "Next",
    "Reducer",
    "Workflow",
    "WorkflowDefinitionError",
    "WorkflowNodeError",
    "WorkflowResult",
    "WorkflowSnapshot",
    "WorkflowWarning",
    "add",
    "append",
    "merge",
    "rerun_workflow",
    "resume_workflow",
    "run_workflow",
    "workflow_request",
    "workflow_snapshot",
]
