"""Quick start: run one task through the kernel and look at what it recorded.

Run it:   python examples/quick_start.py
It runs offline: with no AGENT_MODEL set, the kernel uses the shipped scripted model, which
sends arithmetic to the `calculator` tool and reports its result (it is not a language model).
For a real model, set one variable:   AGENT_MODEL=ollama/llama3.2 python examples/quick_start.py
(or AGENT_MODEL=openai/gpt-4o-mini with OPENAI_API_KEY set).

Tasks, events and traces go to AGENT_DATA_DIR (by default the platform's data folder), so
`core-agent trace last` shows this run's spans afterwards.
"""

import anyio

from core_agent import create_kernel
from shared.agent_protocol import TaskRequest


async def main() -> None:
    # No argument: every setting comes from AGENT_* variables (the model, the data folder...).
    async with create_kernel() as kernel:
        result = await kernel.execute_task(TaskRequest(task="What is 17 * 23 + 4?"))
        print("status:", result.status.value)
        print("answer:", result.output)
        print("usage:", result.usage)  # tokens in and out, cost in USD (None: unknown price)
        print("task id:", result.task_id)

        # Every model and tool call left a span: kind, name, latency.
        for span in await kernel.task_spans(result.task_id):
            print(f"  span {span.kind:<10} {span.name:<28} {span.latency_ms:7.1f} ms")


anyio.run(main)
