"""The prompts the kernel sends to models, as data files (see ``prompt_set``)."""

from core_agent.prompts.prompt_set import (
    PROMPT_SPECS,
    Prompt,
    PromptSet,
    PromptSpec,
    default_prompts,
    load_prompt_set,
)

__all__ = [
    "PROMPT_SPECS",
    "Prompt",
    "PromptSet",
    "PromptSpec",
    "default_prompts",
    "load_prompt_set",
]
