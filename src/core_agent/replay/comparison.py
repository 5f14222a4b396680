"""Comparing two trajectories step by step: where they part, and how.

Only the steps that have a ``key`` are compared (model turns, tool calls and results, policy
decisions, approvals, plan steps, the answer), and only by their keys, so two runs of the same
work compare equal though their ids, times and costs differ. The first difference is the
first position at which the two compared sequences differ; after it, the rest is aligned
(``difflib.SequenceMatcher``) so a step inserted or left out shows as such instead of making
every later step differ.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from core_agent.replay.trajectory import ReplayStep, Trajectory

Change = Literal["replace", "insert", "delete"]


class StepDifference(BaseModel):
    """Steps of A and B that do not match, with a readable diff of their keys.

    ``change``: ``replace`` (different steps in the same place), ``insert`` (steps only B
    has), ``delete`` (steps only A has). ``a`` and ``b`` are the steps on each side (empty
    for the side that has none).
    """

    model_config = ConfigDict(frozen=True)

    change: Change
    a: list[ReplayStep] = Field(default_factory=list)
    b: list[ReplayStep] = Field(default_factory=list)
    diff: str = ""


class StepsComparison(BaseModel):
    """How two runs' compared steps line up.

    ``first_difference``: the first step where they part, one step on each side (or none on
    the side that ended). ``differences``: every place they differ, the rest aligned.
    """

    model_config = ConfigDict(frozen=True)

    matching_steps: int
    """Compared steps that matched before the first difference."""
    first_difference: StepDifference | None = None
    differences: list[StepDifference] = Field(default_factory=list)


class TrajectoryComparison(StepsComparison):
    """How two tasks compare: ``same``, or where they differ."""

    a_task_id: str
    b_task_id: str
    same: bool


def _shown(step: ReplayStep) -> dict[str, object]:
    return {"step": step.number, "kind": step.kind, **(step.key or {})}


def _lines(steps: Sequence[ReplayStep]) -> list[str]:
    lines: list[str] = []
    for step in steps:
        text = json.dumps(_shown(step), indent=2, ensure_ascii=False, default=str)
        lines.extend(line + "\n" for line in text.splitlines())
    return lines


def key_diff(
    a: Sequence[ReplayStep], b: Sequence[ReplayStep], *, a_name: str = "A", b_name: str = "B"
) -> str:
    """A unified diff of the keys of ``a`` against ``b`` (what differs, line by line)."""
    a_label = f"{a_name} step {a[0].number}" if a else f"{a_name} (no step)"
    b_label = f"{b_name} step {b[0].number}" if b else f"{b_name} (no step)"
    return "".join(difflib.unified_diff(_lines(a), _lines(b), a_label, b_label, n=3))


def same_step(a: ReplayStep, b: ReplayStep) -> bool:
    """Whether two compared steps did the same thing."""
    return a.kind == b.kind and a.key == b.key


def compare_steps(
    a: Sequence[ReplayStep],
    b: Sequence[ReplayStep],
    *,
    a_name: str = "A",
    b_name: str = "B",
) -> StepsComparison:
    """Compare two runs' compared steps (see the module docstring)."""
    prefix = 0
    while prefix < len(a) and prefix < len(b) and same_step(a[prefix], b[prefix]):
        prefix += 1
    if prefix == len(a) == len(b):
        return StepsComparison(matching_steps=prefix)
    first_a, first_b = list(a[prefix : prefix + 1]), list(b[prefix : prefix + 1])
    change: Change = "replace" if first_a and first_b else "delete" if first_a else "insert"
    first = StepDifference(
        change=change,
        a=first_a,
        b=first_b,
        diff=key_diff(first_a, first_b, a_name=a_name, b_name=b_name),
    )
    rest_a, rest_b = a[prefix:], b[prefix:]
    keys_a = [json.dumps(_key(s), sort_keys=True, default=str) for s in rest_a]
    keys_b = [json.dumps(_key(s), sort_keys=True, default=str) for s in rest_b]
    matcher = difflib.SequenceMatcher(a=keys_a, b=keys_b, autojunk=False)
    differences = []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            continue
        left, right = list(rest_a[a0:a1]), list(rest_b[b0:b1])
        differences.append(
            StepDifference(
                change="replace" if left and right else "delete" if left else "insert",
                a=left,
                b=right,
                diff=key_diff(left, right, a_name=a_name, b_name=b_name),
            )
        )
    return StepsComparison(matching_steps=prefix, first_difference=first, differences=differences)


def _key(step: ReplayStep) -> object:
    return [step.kind, step.key]


def compare_trajectories(a: Trajectory, b: Trajectory) -> TrajectoryComparison:
    """Compare the work of two tasks step by step (see the module docstring)."""
    steps = compare_steps(a.compared, b.compared)
    return TrajectoryComparison(
        **dict(steps),
        a_task_id=a.task.task_id,
        b_task_id=b.task.task_id,
        same=steps.first_difference is None,
    )
