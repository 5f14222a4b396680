"""A workflow: a graph of steps over a typed state, run as one durable kernel task.

    python examples/workflow.py

`triage` asks an agent (a child task; offline, the shipped scripted model and its
calculator), then `price` and `stock` run in parallel on copies of the state, their notes
merged by the `append` reducer; `decide` jumps straight to `order` when the total is small.
Each layer is checkpointed: a crashed run resumes from its last completed layer.
For a real model set one variable, e.g. AGENT_MODEL=ollama/llama3.2.
"""

from typing import Annotated

import anyio
from pydantic import BaseModel

from core_agent import create_kernel
from core_agent.workflows import Next, Workflow, append, run_workflow
from shared.agent_protocol import TaskRequest


class Order(BaseModel):
    total: str = ""
    notes: Annotated[list[str], append] = []  # parallel nodes' notes are appended
    status: str = ""


async def price(order: Order) -> dict[str, object]:
    return {"notes": [f"price checked: {order.total}"]}


async def stock(order: Order) -> dict[str, object]:
    return {"notes": ["in stock"]}


async def decide(order: Order) -> Next | dict[str, object]:
    if int(order.total.split("=")[-1]) < 1000:
        return Next("order", data="small order: no review")
    return {"status": "sent for review"}


async def review(order: Order) -> dict[str, object]:
    return {"status": "reviewed"}


async def place(order: Order, reason: str | None) -> dict[str, object]:
    return {"status": f"ordered ({reason})"}


workflow = (
    Workflow("purchase", Order, allow_fan_out=True)  # triage fans out on purpose
    .agent("triage", TaskRequest(task="What is 17 * 23?"), output="total")
    .node("price", price)
    .node("stock", stock)
    .node("decide", decide, jumps=["order"])
    .node("review", review)
    .node("order", place)
    .edge("triage", "price")
    .edge("triage", "stock")
    .edge("price", "decide")
    .edge("stock", "decide")
    .edge("decide", "review")
    .edge("review", "order", when=lambda order: order.status == "reviewed")
)


async def main() -> None:
    async with create_kernel() as kernel:
        result = await run_workflow(kernel, workflow, Order())
        print(f"{result.status.value} after {result.layers} layers: {result.state}")
        for span in await kernel.task_spans(result.task_id):
            if span.kind == "step":
                print(f"  span {span.name:<13} {span.started_at:%H:%M:%S.%f}")


anyio.run(main)
