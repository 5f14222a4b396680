"""A typed answer: ask for a pydantic model and get a validated instance back.

Run it:   python examples/typed_output.py
Offline, the shipped scripted model answers from the script below, on purpose with what
small models often write: prose around JSON with single quotes and a trailing comma. The kernel
extracts and repairs it, then validates it against `Invoice`. For a real model set one
variable, e.g. AGENT_MODEL=ollama/llama3.2 (it is offered a `final_answer` tool with the schema;
the script is then ignored).
"""

import json
import tempfile
from datetime import date
from pathlib import Path

import anyio
from pydantic import BaseModel

from core_agent import AgentSettings, create_kernel
from core_agent.contracts.errors import TaskFailedError
from shared.agent_protocol import TaskRequest


class LineItem(BaseModel):
    description: str
    amount: float


class Invoice(BaseModel):
    vendor: str
    due: date
    items: list[LineItem]

    @property
    def total(self) -> float:
        return sum(item.amount for item in self.items)


TEXT = "ACME Ltd. Due 1 July 2025. Paper: 20.50 EUR. Toner: 100.00 EUR."
script = Path(tempfile.mkdtemp()) / "typed_output.json"
script.write_text(json.dumps([
    {"content": "Here is the invoice: {'vendor': 'ACME Ltd', 'due': '2025-07-01', 'items': "
                "[{'description': 'Paper', 'amount': 20.5}, "
                "{'description': 'Toner', 'amount': 100.0},]}"},
]))  # fmt: skip


async def main() -> None:
    async with create_kernel(AgentSettings(scripted_model_script=script)) as kernel:
        try:
            invoice = await kernel.execute_task(
                TaskRequest(task=f"Extract the invoice: {TEXT}"), response_model=Invoice
            )
        except TaskFailedError as failed:  # no valid answer even after one correction round
            print("no invoice:", failed.result.error)
            raise SystemExit(1) from failed
        print(type(invoice).__name__, invoice.model_dump_json(indent=2))
        print(f"{invoice.vendor} wants {invoice.total:.2f} by {invoice.due:%d %B %Y}")


anyio.run(main)
