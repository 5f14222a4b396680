"""The checkpoint a workflow task saves after every layer, and resumes from."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from core_agent.contracts.checkpoint_store import Checkpoint
from shared.agent_protocol import TokenUsage

CHECKPOINT_KEY = "workflow"


class WorkflowCheckpoint(Checkpoint):
    """Where a workflow run stands after its last completed layer.

    ``state`` is the workflow's state then (JSON data of its model, by alias: see
    ``state_data``). The run is in a pass that began at ``pass_start`` and ``pass_also`` (the
    other jumps' targets, and the nodes the pass before had chosen and not yet run when it
    jumped): ``resolved`` are the pass's nodes that ran or were skipped, ``chosen`` those a
    finished node chose that have not run yet, ``data`` what a ``Next`` gave to its target.
    ``layers`` counts completed layers over the whole run (it is the state's version: a
    later checkpoint never has a lower one). ``finished`` is set by the last.
    """

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")
    """NaN and the infinities of a state are written as JSON's ``NaN``/``Infinity`` (which
    pydantic reads back), not ``null`` (which a float field refuses)."""

    kind: Literal["workflow"] = "workflow"
    version: Literal[1] = 1
    workflow: str
    workflow_version: int
    shape: str | None = None
    """The workflow's ``shape`` (``None`` in a checkpoint written before shapes existed)."""
    state: dict[str, Any]
    layers: int = Field(ge=0)
    pass_start: str
    pass_also: list[str] = Field(default_factory=list)
    resolved: list[str] = Field(default_factory=list)
    chosen: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)
    finished: bool = False
    usage: TokenUsage = Field(default_factory=TokenUsage)
    """What the child tasks of the run used, so far (it rolls up into the workflow task)."""
