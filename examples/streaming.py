"""Streaming: every event of a task as it happens, the answer's text as it is written.

Run it:   python examples/streaming.py
Offline, the shipped scripted model sends the arithmetic to the `calculator` tool and streams
its report word by word (it is not a language model). For a real model set one variable,
e.g. AGENT_MODEL=ollama/llama3.2.
"""

from contextlib import aclosing

import anyio

from core_agent import create_kernel
from shared.agent_protocol import (
    LLMDelta,
    PolicyDecided,
    StrategySelected,
    TaskFailed,
    TaskRequest,
    TaskSucceeded,
    ToolCompleted,
    ToolStarted,
)


async def main() -> None:
    async with create_kernel() as kernel:
        request = TaskRequest(task="What is (1234 + 4321) * 2?")
        writing = False  # in the middle of the model's text
        # aclosing: leaving the loop early (break, an exception) cancels the task at once.
        async with aclosing(kernel.stream_task(request)) as events:
            async for event in events:
                if isinstance(event, LLMDelta):
                    print(event.text, end="", flush=True)  # the answer, piece by piece
                    writing = True
                    continue
                if writing:
                    print()
                    writing = False
                detail = ""
                if isinstance(event, StrategySelected):
                    detail = f"{event.strategy}: {event.reason}"
                elif isinstance(event, ToolStarted):
                    detail = f"{event.tool_call.name}({event.tool_call.arguments})"
                elif isinstance(event, PolicyDecided):
                    detail = f"{event.tool}: {event.risk.value} risk ({event.rule})"
                elif isinstance(event, ToolCompleted):
                    detail = f"{event.result.content!r} in {event.latency_ms:.0f} ms"
                elif isinstance(event, TaskSucceeded | TaskFailed):
                    detail = str(event.usage)
                print(f"[{event.seq:>2}] {event.kind} {detail}")


anyio.run(main)
