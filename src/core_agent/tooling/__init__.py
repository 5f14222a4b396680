"""Tool registry, schema generation from type hints, argument validation, tool execution."""
