"""The host's instructions for a task, in the system prompts an executor writes itself.

A task's own system prompt (its request's ``system_prompt``: an agent file's or a nested
agent's prompt, a chat's project instructions) and the enabled capabilities' instructions are
what the application asked of the whole task. ReAct sends them as its system message;
plan-and-execute's planner, steps and synthesis each have a system prompt of their own, and
would otherwise never see them (an agent told to answer in Chinese would plan, work and answer
in whatever language its step prompts suggest).
"""

from __future__ import annotations

INSTRUCTIONS_HEADING = (
    "Instructions for this task from the application (they hold for this part of the work too):"
)


def with_task_instructions(system_prompt: str, instructions: str) -> str:
    """``system_prompt`` followed by the task's ``instructions``, when it has any."""
    if not instructions.strip():
        return system_prompt
    return f"{system_prompt}\n\n{INSTRUCTIONS_HEADING}\n{instructions.strip()}"
