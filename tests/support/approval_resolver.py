"""A process that approves one request at a given instant and prints what it got back.

``python approval_resolver.py REQUEST_ID START_AT``: settings come from the environment;
``START_AT`` (a ``time.time()`` value) lets several resolvers act at the same moment.
"""

import json
import sys
import time

import anyio

from core_agent import create_kernel
from core_agent.contracts.errors import CoreAgentError
from shared.agent_protocol import ApprovalDecision


async def main(request_id: str, start_at: float) -> None:
    async with create_kernel() as kernel:
        await kernel.pending_approvals()  # everything opened and migrated before the start
        await anyio.sleep(max(start_at - time.time(), 0))
        decision = ApprovalDecision(request_id=request_id, approved=True, decided_by=request_id)
        try:
            result = await kernel.resolve_approval(request_id, decision)
        except CoreAgentError as exc:
            print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
            return
        print(json.dumps({"status": result.status.value, "error": result.error}), flush=True)


anyio.run(main, sys.argv[1], float(sys.argv[2]))
