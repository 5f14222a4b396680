"""MCP tool servers (the official ``mcp`` SDK): their tools join the kernel's, started on first use.

Enabled by declaring servers (``AGENT_MCP_SERVERS``, ``AGENT_MCP_FILE``): the container then
loads the ``mcp`` business capability (``McpCapability``).
"""
