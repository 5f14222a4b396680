"""A read-only ``lookup`` tool, and the same tool after its data changed (for reruns)."""

from __future__ import annotations

from core_agent import tool


@tool(capabilities={"read"}, idempotent=True)
def lookup(key: str) -> str:
    """Look a fact up.

    Args:
        key: The fact's name.
    """
    return {"capital_fr": "Paris"}.get(key, "unknown")


@tool(name="lookup", capabilities={"read"}, idempotent=True)
def lookup_moved(key: str) -> str:
    """Look a fact up (the version after a change of data).

    Args:
        key: The fact's name.
    """
    return {"capital_fr": "Lyon"}.get(key, "unknown")
