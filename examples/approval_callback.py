"""Risky calls: a callback approves or denies them; without one, the task waits durably.

Run it:   python examples/approval_callback.py
Offline, the shipped scripted model plays the model from the script below. For a real model
set one variable, e.g. AGENT_MODEL=ollama/llama3.2 (the script is then ignored).
"""

import json
import tempfile
from pathlib import Path

import anyio

from core_agent import AgentSettings, create_kernel, tool
from shared.agent_protocol import ApprovalDecision, ApprovalRequest, TaskRequest, ToolCompleted


@tool(capabilities={"write"})  # the shipped policy grades a write "medium" risk
def send_payment(to: str, amount: float) -> str:
    """Send money to someone.

    Args:
        to: Who gets paid.
        amount: How much, in euros.
    """
    return f"paid {amount:.2f} EUR to {to}"


def approve_small(request: ApprovalRequest) -> ApprovalDecision:
    """Asked before each call at or above the approval threshold (a GUI shows a dialog)."""
    arguments = request.tool_call.arguments if request.tool_call else None
    ok = arguments is not None and arguments["amount"] <= 100
    print(f"  asked: {arguments} ({request.risk.value} risk) -> {'yes' if ok else 'no'}")
    reason = "" if ok else "over my 100 EUR limit"  # the model reads the reason
    return ApprovalDecision(request_id=request.request_id, approved=ok, reason=reason)


script = Path(tempfile.mkdtemp()) / "payments.json"
script.write_text(json.dumps({"conversations": [  # one conversation per task, by its text
    {"match": "plumber", "turns": [
        {"tool_calls": [{"name": "send_payment", "arguments": {"to": "plumber", "amount": 80}},
                        {"name": "send_payment", "arguments": {"to": "casino", "amount": 5000}}]},
        {"content": "I paid the plumber; the casino payment was refused."}]},
    {"match": "rent", "turns": [
        {"tool_calls": [{"name": "send_payment", "arguments": {"to": "landlord", "amount": 950}}]},
        {"content": "The rent is paid."}]},
]}))  # fmt: skip
settings = AgentSettings(scripted_model_script=script, policy_approval_required_risk="medium")


async def main() -> None:
    print("1. A callback decides each risky call while the task runs:")
    async with create_kernel(settings, tools=[send_payment], approval_callback=approve_small) as k:
        result = await k.execute_task(TaskRequest(task="Pay the plumber and the casino."))
        for event in await k.task_events(result.task_id):
            if isinstance(event, ToolCompleted):
                print(f"  {event.result.name}: {event.result.content}")
        print(f"  {result.status.value}: {result.output}")

    print("2. Without a callback the task waits, and outlives its kernel:")
    async with create_kernel(settings, tools=[send_payment]) as kernel:
        waiting = await kernel.execute_task(TaskRequest(task="Pay the rent."))
        print(f"  {waiting.status.value} on request {waiting.pending_approval}")

    # Later, perhaps in another process (`core-agent approvals` lists the same requests):
    async with create_kernel(settings, tools=[send_payment]) as kernel:
        for request in await kernel.pending_approvals():
            if request.task_id == waiting.task_id and request.tool_call is not None:
                print(f"  pending: {request.tool_call.name}({request.tool_call.arguments})")
                decision = ApprovalDecision(request_id=request.request_id, approved=True)
                result = await kernel.resolve_approval(request.request_id, decision)
                print(f"  {result.status.value}: {result.output}")


anyio.run(main)
