"""A host whose tasks answer with a response model after a risky call waits for a human.

    python -m support.structured_host DATA_DIR EFFECTS REQUEST_ID MODE

resolves ``REQUEST_ID`` (approved) in a new process on the same database and prints the
result as JSON. ``MODE``: ``given`` passes ``Restock`` again to ``resolve_approval``;
``imported`` only imports the module that defines it; ``unknown`` does neither.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

from core_agent import tool
from core_agent.container import KernelContainer
from core_agent.contracts.errors import CoreAgentError
from core_agent.contracts.settings import AgentSettings
from core_agent.kernel.agent_kernel import AgentKernel
from core_agent.tooling.registry import ToolRegistry
from providers.scripted_gateway import (
    ScriptedConversation,
    ScriptedLLMGateway,
    ScriptedToolCall,
    ScriptedTurn,
)
from shared.agent_protocol import ApprovalDecision

TASK = "Restart the shop and count what is left."
ANSWER = json.dumps({"service": "shop", "restarted": True, "items": 12})


def conversations() -> list[ScriptedConversation]:
    restart = ScriptedTurn(
        tool_calls=[ScriptedToolCall(name="restart", arguments={"service": "shop"})]
    )
    plan = json.dumps({"steps": [{"id": "a", "goal": "restart the shop"}]})
    return [
        ScriptedConversation(match=r"^Plan this task:", turns=[ScriptedTurn(content=plan)]),
        ScriptedConversation(
            match=r"^Your step \(a\)", turns=[restart, ScriptedTurn(content="shop restarted")]
        ),
        ScriptedConversation(
            match=r"^Write the final answer", turns=[ScriptedTurn(content=ANSWER)]
        ),
        ScriptedConversation(
            match=r"^Restart the shop", turns=[restart, ScriptedTurn(content=ANSWER)]
        ),
    ]


def kernel_for(data_dir: Path, effects: Path) -> AgentKernel:
    @tool(capabilities={"exec"})
    def restart(service: str) -> str:
        """Restart a service (high risk: a human approves)."""
        with effects.open("a") as handle:
            handle.write(f"restart {service}\n")
        return f"{service} restarted"

    container = KernelContainer()
    container.settings.override(AgentSettings(data_dir=data_dir, model_max_retries=0))
    container.llm_gateway.override(ScriptedLLMGateway(conversations=conversations()))
    container.tool_registry.override(ToolRegistry([restart]))
    kernel: AgentKernel = container.kernel()
    return kernel


async def main(data_dir: str, effects: str, request_id: str, mode: str) -> None:
    given: Any = None
    if mode in ("given", "imported"):
        from support.structured_models import Restock

        given = Restock if mode == "given" else None
    async with kernel_for(Path(data_dir), Path(effects)) as kernel:
        decision = ApprovalDecision(request_id=request_id, approved=True)
        try:
            result = await kernel.resolve_approval(request_id, decision, response_model=given)
        except CoreAgentError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
            return
        print(result.model_dump_json(), flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
