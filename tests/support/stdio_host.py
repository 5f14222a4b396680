"""A host set-up for stdio server tests: a data directory, a workspace, a script, a policy.

The scripted model knows three tasks: ``写季度报告`` writes ``报告.txt`` with ``write_file``,
which the policy grades high (a human must approve); ``nap`` runs ``sleep 1`` and ``long
nap`` runs ``sleep 30`` (``sleep`` is an allowed command, so neither asks); ``chatter``
answers ``CHATTER`` (100 kB in 20,000 words, so as many ``llm.delta`` events).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from support.stdio_client import StdioClient

REPORT_TASK = "写季度报告，保存到 报告.txt"
REPORT_FILE = "报告.txt"
REPORT_TEXT = "季度报告：一切正常"
REPORT_ANSWER = "报告已写好：报告.txt"
CHATTER = "word " * 20_000

SCRIPT = {
    "conversations": [
        {
            "match": "写季度报告",
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "write_file",
                            "arguments": {"path": REPORT_FILE, "content": REPORT_TEXT},
                        }
                    ]
                },
                {"content": REPORT_ANSWER},
            ],
        },
        {
            "match": "^nap",
            "turns": [
                {"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 1"}}]},
                {"content": "rested"},
            ],
        },
        {"match": "^chatter", "turns": [{"content": CHATTER}]},
        {
            "match": "^long nap",
            "turns": [
                {"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 30"}}]},
                {"content": "rested for long"},
            ],
        },
    ]
}

POLICY = """
[[rule]]
name = "reports-need-a-human"
effect = "grade"
risk = "high"
tools = ["write_file"]
reason = "reports are read by the board"
"""


@dataclass
class StdioHost:
    """What a server of these tests runs with."""

    data_dir: Path
    workspace: Path
    env: dict[str, str] = field(default_factory=dict)

    def serve(
        self, *args: str, read_stdout: bool = True, read_stderr: bool = True, **env: str
    ) -> StdioClient:
        """Start ``core-agent serve --stdio`` with this set-up (``env`` added).

        ``read_stdout``/``read_stderr`` off: a host that does not read them (yet).
        """
        return StdioClient(
            self.data_dir,
            args=args,
            env={**self.env, **env},
            cwd=self.workspace,
            read_stdout=read_stdout,
            read_stderr=read_stderr,
        )


def stdio_host(root: Path) -> StdioHost:
    """Write the script and policy under ``root``; the set-up that uses them."""
    workspace = root / "workspace"
    workspace.mkdir()
    script = root / "script.json"
    script.write_text(json.dumps(SCRIPT, ensure_ascii=False), encoding="utf-8")
    policy = root / "policy.toml"
    policy.write_text(POLICY, encoding="utf-8")
    return StdioHost(
        data_dir=root / "data",
        workspace=workspace,
        env={
            "AGENT_SCRIPTED_MODEL_SCRIPT": str(script),
            "AGENT_POLICY_FILE": str(policy),
            "AGENT_WORKSPACE_ROOTS": str(workspace),
            "AGENT_SANDBOX_ALLOWED_COMMANDS": "sleep",
            "AGENT_STRATEGY_MODE": "react",
            "AGENT_MEMORY_RECALL_K": "0",
        },
    )
