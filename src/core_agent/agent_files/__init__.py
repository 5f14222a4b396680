"""Agent files: an agent declared in YAML (model, prompt, tools, policy, memory, strategy).

``load_agent_file(path)`` returns an ``AgentDefinition`` that ``create_kernel(agent=...)``
and ``core-agent run --agent FILE`` apply over the settings; see ``agent_definition`` for the
layering, ``schema`` for the keys.
"""

from core_agent.agent_files.agent_definition import AgentDefinition, load_agent_file
from core_agent.agent_files.problems import AgentFileError, AgentFileProblem

__all__ = ["AgentDefinition", "AgentFileError", "AgentFileProblem", "load_agent_file"]
