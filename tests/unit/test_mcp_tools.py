"""MCP servers as declared, and their tools as the kernel takes them (no server is started)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from mcp_types import CallToolResult, ImageContent, TextContent, Tool

from core_agent.container import create_kernel
from core_agent.contracts.errors import ConfigurationError, ToolArgumentsError
from core_agent.contracts.settings import AgentSettings
from core_agent.contracts.tool import Capability, ToolContext
from core_agent.safety.policy_engine import RulePolicyEngine, load_rules
from core_agent.tooling.function_tool import FunctionTool
from core_agent.tooling.registry import ToolRegistry
from providers.mcp.mcp_tool import McpTool, result_text
from providers.mcp.server_pool import McpServers
from providers.mcp.server_settings import McpServerSettings, declared_servers
from support.capability_entry_points import install_capabilities

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
    "required": ["path"],
    "additionalProperties": False,
}
CONTEXT = ToolContext(task_id="t", session_id="s", call_id="c")


def tool_of(capabilities: list[str] | None, name: str = "read_note") -> McpTool:
    server = McpServerSettings(command="server", capabilities=capabilities)
    listed = Tool(name=name, description="Read a note.", input_schema=SCHEMA)
    return McpTool(McpServers({"notes": server}), "notes", listed)


def test_servers_come_from_a_toml_or_claude_json_file_and_the_setting_wins(
    tmp_path: Path,
) -> None:
    toml = tmp_path / "mcp.toml"
    toml.write_text(
        '[mcp_servers.time]\ncommand = "mcp-server-time"\ncapabilities = ["read"]\n'
        '[mcp_servers.notes]\nurl = "http://127.0.0.1:9/mcp"\n'
        'headers = { Authorization = "Bearer x" }\n'
    )
    settings = AgentSettings(
        mcp_file=toml, mcp_servers={"notes": {"url": "http://127.0.0.1:10/mcp"}}
    )
    servers = declared_servers(settings)
    assert servers["time"].transport == "stdio" and servers["time"].capabilities == ("read",)
    assert servers["notes"].url == "http://127.0.0.1:10/mcp" and servers["notes"].headers == {}

    claude = tmp_path / "claude_desktop_config.json"
    claude.write_text(json.dumps({"mcpServers": {"fs": {"command": "npx", "args": ["x"]}}}))
    (only,) = declared_servers(AgentSettings(mcp_file=claude)).values()
    assert (only.command, only.args, only.capabilities) == ("npx", ("x",), None)


def test_servers_can_be_declared_in_an_environment_variable(monkeypatch) -> None:
    monkeypatch.setenv("AGENT_MCP_SERVERS", '{"time": {"command": "mcp-server-time"}}')
    assert declared_servers(AgentSettings())["time"].command == "mcp-server-time"


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"t": {"command": "x", "url": "http://h/mcp"}}, "give either 'command'"),
        ({"t": {}}, "give either 'command'"),
        ({"t": {"command": "x", "capabilities": ["delete"]}}, "capabilities.0: Input should be"),
        ({"t": {"command": "x", "headers": {"a": "b"}}}, "'headers' are for a 'url'"),
        ({"t": {"url": "ftp://h"}}, "url: String should match"),
        ({"t": {"command": "x", "comand": "y"}}, "comand: Extra inputs are not permitted"),
        ({"a.b": {"command": "x"}}, "MCP server name 'a.b'"),
    ],
)
def test_a_wrong_declaration_is_refused_when_the_kernel_is_built(
    monkeypatch, tmp_path: Path, servers, message
) -> None:
    install_capabilities(monkeypatch, tmp_path / "site")
    settings = AgentSettings(data_dir=tmp_path / "data", mcp_servers=servers)
    with pytest.raises(ConfigurationError, match="MCP server") as caught:
        create_kernel(settings)
    assert message in str(caught.value)


def test_an_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read AGENT_MCP_FILE"):
        declared_servers(AgentSettings(mcp_file=tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[mcp_servers.time\n")
    with pytest.raises(ConfigurationError, match="cannot be parsed"):
        declared_servers(AgentSettings(mcp_file=bad))


def test_tools_are_namespaced_with_valid_names_and_keep_the_servers_schema() -> None:
    tool = tool_of(["read"], name="notes.read/v2")
    assert tool.spec.name == "notes__notes_read_v2"
    assert tool.spec.parameters == SCHEMA
    assert "MCP server 'notes'" in tool.spec.description
    with pytest.raises(ValueError, match="longer than 64"):
        tool_of(["read"], name="x" * 60)


def test_arguments_are_checked_against_the_schema_before_any_call() -> None:
    tool = tool_of(["read"])
    assert tool.validate_arguments({"path": "a.md"}) == {"path": "a.md"}
    with pytest.raises(ToolArgumentsError) as caught:
        tool.validate_arguments({"limit": 0, "color": "red"})
    message = str(caught.value)
    assert message.startswith("invalid arguments for tool 'notes__read_note': ")
    assert "'path' is a required property" in message
    assert "limit: 0 is less than the minimum of 1" in message
    assert "'color' was unexpected" in message


def test_the_policy_grades_by_declared_capabilities_and_asks_for_undeclared_servers() -> None:
    policy = RulePolicyEngine.from_file(None)

    def decide(tool: McpTool, engine: RulePolicyEngine = policy):
        arguments = {"path": "a.md"}
        return engine.evaluate(tool.spec, arguments, assessment=tool.assess(arguments, CONTEXT))

    declared = tool_of(["read"])
    assert declared.spec.capabilities == {Capability.READ}
    assert decide(declared).risk.value == "low"

    undeclared = tool_of(None)
    assert undeclared.spec.capabilities == {Capability.READ, Capability.WRITE, Capability.NETWORK}
    assert decide(undeclared).risk.value == "high"  # at the default threshold: approval

    # exec is graded high, but the tool is not an `exec` tool of the kernel's sandbox.
    runs = tool_of(["exec"])
    assert Capability.EXEC not in runs.spec.capabilities and decide(runs).risk.value == "high"

    # A user's rule may vouch for an undeclared server's tools.
    trusted = load_rules(
        '[[rule]]\nname = "notes-ok"\nrisk = "low"\ntools = ["notes__*"]\n', "test"
    )
    assert decide(undeclared, RulePolicyEngine(trusted)).risk.value == "low"


def test_results_are_their_text_other_content_named() -> None:
    result = CallToolResult(
        content=[
            TextContent(type="text", text="one"),
            ImageContent(type="image", data="AAAA", mime_type="image/png"),
        ]
    )
    assert result_text(result) == "one\n[image (image/png) not shown]"
    structured = CallToolResult(content=[], structured_content={"a": 1})
    assert result_text(structured) == '{"a": 1}'


def test_discovered_tools_join_the_registry_on_first_listing(caplog) -> None:
    calls = []

    def echo(text: str) -> str:
        """Echo."""
        return text

    def discover():
        calls.append(1)
        return [FunctionTool(echo, name="found"), FunctionTool(echo, name="known")]

    registry = ToolRegistry([FunctionTool(echo, name="known")])
    registry.defer(discover)
    assert calls == []  # nothing asked at registration
    with caplog.at_level(logging.WARNING):
        assert registry.names() == ["found", "known"]
    assert "a tool named 'known' is already registered" in caplog.text
    assert registry.get("found").spec.name == "found" and calls == [1]  # asked once
