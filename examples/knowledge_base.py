"""A knowledge base: ingest documents (one in Chinese), then a task answered from them.

Run it:   python examples/knowledge_base.py
Everything goes into a temporary data folder, not your own knowledge base. Offline, the shipped
scripted model plays the model from the script below: turn 1 searches with `knowledge_search`,
turn 2 answers. The search itself is real: keyword (BM25, Chinese words segmented) and vector
search (the offline hashing embedder), fused. For a real model set one variable, e.g.
AGENT_MODEL=ollama/llama3.2: it then writes its own queries and answer from the passages.
"""

import json
import tempfile
from pathlib import Path

import anyio

from core_agent import AgentSettings, create_kernel
from shared.agent_protocol import TaskRequest, ToolCompleted

DOCUMENTS = {
    "returns.md": "# Returns\n\nUnopened items can be returned within 30 days for a refund.\n",
    "shipping.txt": "Orders ship within two working days, by tracked post.\n",
    "保修.txt": "保修政策：所有电器产品享受两年免费保修。人为损坏不在保修范围内。\n",  # warranty
}
SCRIPT = [
    {"tool_calls": [{"name": "knowledge_search", "arguments": {"query": "电器 保修", "k": 2}}]},
    {"content": "电器产品享受两年免费保修（人为损坏除外）。"},
]


async def main(work: Path) -> None:
    docs = work / "docs"
    docs.mkdir()
    for name, text in DOCUMENTS.items():
        (docs / name).write_text(text, encoding="utf-8")
    (work / "script.json").write_text(json.dumps(SCRIPT))
    settings = AgentSettings(data_dir=work / "data", scripted_model_script=work / "script.json")

    async with create_kernel(settings) as kernel:
        for result in await kernel.ingest(docs):  # what `core-agent ingest docs/` does
            print(f"{result.status}: {Path(result.source).name} ({result.chunks} chunks)")

        # "How long is the warranty on appliances?"
        answer = await kernel.execute_task(TaskRequest(task="电器的保修期是多久？"))
        for event in await kernel.task_events(answer.task_id):
            if isinstance(event, ToolCompleted) and not event.result.is_error:
                print(f"{event.result.name} found:")
                for hit in json.loads(event.result.content):  # the passages the model was given
                    name, scores = Path(hit["source"]).name, hit["scores"]
                    print(f"  #{hit['rank']} {name} {scores}: {hit['text']}")
        print(f"{answer.status.value}: {answer.output}")


with tempfile.TemporaryDirectory() as folder:
    anyio.run(main, Path(folder))
