"""Replay: a task's trajectory from its records, reruns, forks, comparisons, export and import.

Everything a task did is in its stored events and spans; this package reads them back.

* ``TaskRecords`` (an async context manager over a data directory): ``trajectory`` (every
  step, numbered, with no model called and no tool run), ``compare`` (two tasks step by
  step), ``export`` (JSON lines) and ``import_export``.
* ``rerun_task``: the task's request again through the current kernel, the model played back
  from the recording, the tools too with ``tool_results="recorded"``; the report names the
  first step where the run diverges.
* ``fork_task``: a new task from the original's conversation at a step, carried on live.

The ``core-agent replay``, ``fork``, ``diff``, ``export`` and ``import`` commands are these.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core_agent.replay.comparison import (
        StepDifference,
        TrajectoryComparison,
        compare_trajectories,
    )
    from core_agent.replay.fork import ForkResult, fork_task
    from core_agent.replay.recorded_gateway import RecordedLLMGateway, ReplayDivergedError
    from core_agent.replay.rerun import RerunReport, rerun_task
    from core_agent.replay.task_export import EXPORT_VERSION, TaskExport
    from core_agent.replay.task_records import ImportedTask, TaskRecords
    from core_agent.replay.trajectory import ReplayStep, Trajectory, build_trajectory

# Loaded on first use: reading a task back needs none of what a rerun or a fork builds.
_LAZY = {
    "EXPORT_VERSION": "core_agent.replay.task_export",
    "ForkResult": "core_agent.replay.fork",
    "ImportedTask": "core_agent.replay.task_records",
    "RecordedLLMGateway": "core_agent.replay.recorded_gateway",
    "ReplayDivergedError": "core_agent.replay.recorded_gateway",
    "ReplayStep": "core_agent.replay.trajectory",
    "RerunReport": "core_agent.replay.rerun",
    "StepDifference": "core_agent.replay.comparison",
    "TaskExport": "core_agent.replay.task_export",
    "TaskRecords": "core_agent.replay.task_records",
    "Trajectory": "core_agent.replay.trajectory",
    "TrajectoryComparison": "core_agent.replay.comparison",
    "build_trajectory": "core_agent.replay.trajectory",
    "compare_trajectories": "core_agent.replay.comparison",
    "fork_task": "core_agent.replay.fork",
    "rerun_task": "core_agent.replay.rerun",
}

__all__ = [
    "EXPORT_VERSION",
    "ForkResult",
    "ImportedTask",
    "RecordedLLMGateway",
    "ReplayDivergedError",
    "ReplayStep",
    "RerunReport",
    "StepDifference",
    "TaskExport",
    "TaskRecords",
    "Trajectory",
    "TrajectoryComparison",
    "build_trajectory",
    "compare_trajectories",
    "fork_task",
    "rerun_task",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'core_agent.replay' has no attribute {name!r}")
    return getattr(import_module(module), name)
