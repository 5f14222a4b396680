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

from core_agent.replay.comparison import StepDifference, TrajectoryComparison, compare_trajectories
from core_agent.replay.fork import ForkResult, fork_task
from core_agent.replay.recorded_gateway import RecordedLLMGateway, ReplayDivergedError
from core_agent.replay.rerun import RerunReport, rerun_task
from core_agent.replay.task_export import EXPORT_VERSION, TaskExport
from core_agent.replay.task_records import ImportedTask, TaskRecords
from core_agent.replay.trajectory import ReplayStep, Trajectory, build_trajectory

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
