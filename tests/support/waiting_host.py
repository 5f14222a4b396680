"""A host process that asks for approval and never answers; the test kills it mid-wait."""

import anyio

from core_agent import create_kernel
from shared.agent_protocol import TaskRequest


async def never_answer(request):
    print(f"WAITING {request.request_id}", flush=True)
    await anyio.sleep(3600)


async def main() -> None:
    kernel = create_kernel(approval_callback=never_answer)
    async with kernel:
        await kernel.execute_task(TaskRequest(task="Show me the token.", force_mode="react"))


anyio.run(main)
