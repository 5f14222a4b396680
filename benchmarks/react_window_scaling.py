"""ReAct step overhead at 10 and at 500 messages of conversation, with a prompt window set.

One long ReAct task per repetition: step ``i`` calls ``record(n=i)`` (a cheap tool that is
not idempotent, so every call really runs), until the conversation holds about 510 messages.
Steps are timed between consecutive ``tool.completed`` events, and grouped by the length of
the conversation the step's model call was fitted from: 6-14 messages ("10") and 490-510
("500"). The model is a tiny in-process gateway that answers from the last message alone, so
its own cost does not grow with the conversation; what grows is the kernel's: fitting the
conversation to the window (``PromptWindow.fit``), the checkpoint, anything else that walks
the whole history.

Two windows (``AGENT_CONTEXT_MAX_TOKENS``): one that holds the whole conversation (the fit's
byte-bound shortcut) and one that does not (the 500-message prompt is cut, its messages'
tokens counted). After each task its events, ledger and checkpoint are checked: as many
successful tool calls as steps, each with its own result, and the conversation as long as
the grouping assumed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio

from benchmarks.stats import STORES_NOTE, check_tool_steps, durable_settings, summary
from core_agent import KernelContainer, tool
from core_agent.contracts.llm_gateway import (
    ILLMGateway,
    LLMRequest,
    LLMResponse,
    LLMStreamItem,
)
from core_agent.orchestration.loop_journal import LoopCheckpoint
from core_agent.tooling.registry import ToolRegistry
from shared.agent_protocol import (
    AssistantMessage,
    TaskRequest,
    TokenUsage,
    ToolCall,
    ToolCompleted,
    ToolMessage,
)

OPENING = 2
"""Messages before the first step: the system prompt and the task."""
BUCKETS = {"10": (6, 14), "500": (490, 510)}
"""Conversation lengths (inclusive) whose steps are grouped under each label."""
STEPS = (BUCKETS["500"][1] - OPENING) // 2 + 1
"""Enough steps for the last model call to see 510 messages."""
WINDOWS = {"whole": 100_000, "cut": 3_000}
"""Prompt budgets in tokens: one holds 510 messages, the other about a third of them."""

RECORDED: list[int] = []


@tool
async def record(n: int) -> str:
    """Record a number.

    Args:
        n: The number to record.
    """
    RECORDED.append(n)
    return f"recorded {n}"


class CountingGateway(ILLMGateway):
    """Calls ``record(n=i+1)`` after ``recorded i`` until ``steps``, then answers: O(1)."""

    def __init__(self, steps: int) -> None:
        self._steps = steps

    @property
    def model_name(self) -> str:
        """``bench/counting``."""
        return "bench/counting"

    def context_window(self) -> int | None:
        """Unknown: the window comes from the settings."""
        return None

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The next ``record`` call, or the answer after the last one."""
        last = request.messages[-1]
        done = int(last.content.rsplit(" ", 1)[-1]) if isinstance(last, ToolMessage) else 0
        usage = TokenUsage(input_tokens=1, output_tokens=1, cost_usd=0.0)
        if done >= self._steps:
            message = AssistantMessage(content="done")
            return LLMResponse(message=message, usage=usage, model=self.model_name)
        n = done + 1
        call = ToolCall(
            id=f"call_{n}", name="record", arguments={"n": n}, raw_arguments=json.dumps({"n": n})
        )
        message = AssistantMessage(content=None, tool_calls=(call,))
        return LLMResponse(
            message=message, usage=usage, model=self.model_name, finish_reason="tool_calls"
        )

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamItem]:
        """The same reply, in one piece."""
        yield await self.complete(request)


def conversation_length(step: int) -> int:
    """Messages the model call of ``step`` (1-based) was fitted from."""
    return OPENING + 2 * (step - 1)


async def measure(tasks: int, window: int, data_dir: Path) -> dict[str, list[float]]:
    """Step times (ms) by bucket over ``tasks`` tasks of ``STEPS`` steps each."""
    container = KernelContainer()
    container.settings.override(
        durable_settings(data_dir, max_turns=STEPS + 1, context_max_tokens=window)
    )
    container.tool_registry.override(ToolRegistry([record]))
    container.llm_gateway.override(CountingGateway(STEPS))
    ledger = container.tool_call_ledger()
    checkpoints = container.checkpoint_store()
    kernel = container.kernel()
    marks: list[float] = []
    kernel.event_bus.subscribe(ToolCompleted, lambda _event: marks.append(time.perf_counter()))
    samples: dict[str, list[float]] = {label: [] for label in BUCKETS}
    async with kernel:
        for _ in range(tasks):
            RECORDED.clear()
            marks.clear()
            result = await kernel.execute_task(TaskRequest(task="benchmark", force_mode="react"))
            assert result.status.value == "succeeded", result.error
            # Interval i-1 ends with step i's tool.completed: it holds step i's model call.
            for step in range(2, len(marks) + 1):
                length = conversation_length(step)
                for label, (low, high) in BUCKETS.items():
                    if low <= length <= high:
                        samples[label].append((marks[step - 1] - marks[step - 2]) * 1000.0)
            await verify(kernel, checkpoints, ledger, result.task_id)
    return samples


async def verify(kernel: Any, checkpoints: Any, ledger: Any, task_id: str) -> None:
    """Every step a successful, distinct call; the conversation as long as assumed."""
    await check_tool_steps(
        kernel,
        task_id,
        STEPS,
        ledger=ledger,
        contents=[f"recorded {n}" for n in range(1, STEPS + 1)],
    )
    assert list(range(1, STEPS + 1)) == RECORDED, RECORDED[:10]
    (key,) = await checkpoints.list_keys(task_id)
    checkpoint = await checkpoints.load(task_id, key, LoopCheckpoint)
    assert checkpoint is not None
    assert checkpoint.phase == "answered"
    # The opening, a call and its result per step, the answer.
    assert checkpoint.message_count == OPENING + 2 * STEPS + 1, checkpoint.message_count


def report(window_label: str, window: int, samples: dict[str, list[float]]) -> dict[str, Any]:
    """One JSON line per window: p50/p95 per bucket and the 500/10 ratios."""
    stats = {label: summary(values) for label, values in samples.items()}
    return {
        "benchmark": "react_window_scaling",
        "window": window_label,
        "context_max_tokens": window,
        **{
            f"{label}_{key}": round(value, 4)
            for label, values in stats.items()
            for key, value in values.items()
            if key in ("n", "p50_ms", "p95_ms")
        },
        "ratio_p50": round(stats["500"]["p50_ms"] / stats["10"]["p50_ms"], 3),
        "ratio_p95": round(stats["500"]["p95_ms"] / stats["10"]["p95_ms"], 3),
        "target_ratio": 1.2,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--only", choices=sorted(WINDOWS), default=None)
    args = parser.parse_args(argv)
    lines = []
    for label, window in WINDOWS.items():
        if args.only and label != args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            anyio.run(measure, 2, window, Path(tmp))  # warm-up: imports, caches, WAL file
            samples = anyio.run(measure, args.tasks, window, Path(tmp))
        line = report(label, window, samples)
        lines.append(line)
        print(json.dumps(line))
    print(f"each task {STEPS} steps, every step a successful record(n=i); {STORES_NOTE}")
    for line in lines:
        verdict = "meets" if line["ratio_p50"] < line["target_ratio"] else "MISSES"
        print(
            f"window {line['window']} ({line['context_max_tokens']} tokens): "
            f"10 messages p50 {line['10_p50_ms']:.3f} ms p95 {line['10_p95_ms']:.3f} ms; "
            f"500 messages p50 {line['500_p50_ms']:.3f} ms p95 {line['500_p95_ms']:.3f} ms; "
            f"ratio p50 {line['ratio_p50']:.2f}, p95 {line['ratio_p95']:.2f} "
            f"({verdict} the < 1.2 target)"
        )


if __name__ == "__main__":
    main()
