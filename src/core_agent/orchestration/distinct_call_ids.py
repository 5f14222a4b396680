"""Every tool call of a model's answer gets an id of its own.

Providers and proxies sometimes send two calls of one answer under the same id (or none,
which a gateway numbers). The kernel keys a call by its id everywhere after: its ledger row
(the second call would be given the first one's result on resume), a nested agent's child
task, the tool message that answers it, the replay's trajectory. A repeated id is renamed
once, here, before any of that sees it; the answer as recorded and sent back to the model
carries the new ids, so the conversation stays consistent.
"""

from __future__ import annotations

import dataclasses

from core_agent.contracts.llm_gateway import LLMResponse


def with_distinct_call_ids(response: LLMResponse) -> LLMResponse:
    """``response``, its tool calls renamed where an id repeats (``dup``, ``dup_2``...)."""
    calls = response.message.tool_calls
    if len(calls) < 2 or len({call.id for call in calls}) == len(calls):
        return response
    taken = {call.id for call in calls}
    seen: set[str] = set()
    renamed = []
    for call in calls:
        if call.id in seen:
            number = 2
            while f"{call.id}_{number}" in taken:
                number += 1
            call = call.model_copy(update={"id": f"{call.id}_{number}"})
            taken.add(call.id)
        seen.add(call.id)
        renamed.append(call)
    message = response.message.model_copy(update={"tool_calls": tuple(renamed)})
    return dataclasses.replace(response, message=message)
